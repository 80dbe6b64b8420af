#!/usr/bin/env bash
# The determinism suite on a GPU host, then its report (docs/results/determinism.md + .json).
# usage: scripts/determinism_suite.sh [RESULTS_DIR]
#
# Two lanes, each a sequence of pytest runs:
#   dense: qwen3-8b with all three arms side by side, then the HTTP path (qwen3-8b, text endpoints);
#   moe:   qwen3-30b-a3b (61 GB: one arm at a time) with --corun on every scenario, then default
#          SGLang on the negative-control scenarios a, b, d, i.
# With two or more GPUs visible the lanes run at once, one GPU each; with one they run in turn.
# Rows accumulate in RESULTS_DIR/<lane part>/suite.jsonl; the report reads them all.
# Environment: see tests/gpu/test_suite.py and tests/gpu/conftest.py; DENSE_SHAPE and MOE_SHAPE
# pick other shapes (e.g. MOE_SHAPE=qwen3-moe-small for a quick run).
set -uo pipefail
cd "$(dirname "$0")/.."
results="$(realpath -m "${1:-results/determinism}")"
dense="${DENSE_SHAPE:-qwen3-8b}"
moe="${MOE_SHAPE:-qwen3-30b-a3b}"
mkdir -p "$results"/{dense,http,moe,moe-default}
pytest=(python3 -m pytest -v -rA --durations=0 -p no:cacheprovider)

dense_lane() {  # GPU in $1
    CUDA_VISIBLE_DEVICES=$1 CORUN_RESULTS="$results/dense" CORUN_SUITE_SHAPES="$dense" CORUN_SUITE_STATIC_GB=28 \
        "${pytest[@]}" tests/gpu/test_suite.py > "$results/dense.log" 2>&1
    local a=$?
    CUDA_VISIBLE_DEVICES=$1 CORUN_RESULTS="$results/http" CORUN_SHAPE="$dense" CORUN_STATIC_GB=24 \
        CORUN_SERVER_ARGS="${CORUN_SERVER_ARGS:---attention-backend flashinfer}" \
        "${pytest[@]}" tests/gpu/test_http.py > "$results/http.log" 2>&1
    return $(( a || $? ))
}

moe_lane() {  # GPU in $1
    CUDA_VISIBLE_DEVICES=$1 CORUN_RESULTS="$results/moe" CORUN_SUITE_SHAPES="$moe" CORUN_SUITE_ARMS=corun \
        CORUN_SUITE_STATIC_GB=70 "${pytest[@]}" tests/gpu/test_suite.py > "$results/moe.log" 2>&1
    local a=$?
    CUDA_VISIBLE_DEVICES=$1 CORUN_RESULTS="$results/moe-default" CORUN_SUITE_SHAPES="$moe" CORUN_SUITE_ARMS=default \
        CORUN_SUITE_STATIC_GB=70 "${pytest[@]}" tests/gpu/test_suite.py -k "test_a or test_b or test_d or test_i" \
        > "$results/moe-default.log" 2>&1
    return $(( a || $? ))
}

gpus=($(nvidia-smi --query-gpu=index --format=csv,noheader))
if [ "${#gpus[@]}" -ge 2 ]; then
    dense_lane "${gpus[0]}" & d=$!
    moe_lane "${gpus[1]}" & m=$!
    wait $d; status=$?
    wait $m; status=$(( status || $? ))
else
    dense_lane "${gpus[0]}"; status=$?
    moe_lane "${gpus[0]}"; status=$(( status || $? ))
fi
cat "$results"/*/suite.jsonl > "$results/suite.jsonl"
python3 scripts/determinism_report.py "$results" \
    --command "scripts/determinism_suite.sh ${1:-}" \
    --host "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
exit $status
