#!/usr/bin/env bash
# The determinism suite on a GPU host, on every served configuration, then its report
# (docs/results/determinism.md + .json, recounted from the per-request digests).
# usage: scripts/determinism_suite.sh [RESULTS_DIR]
#
# For each model (SMALL_SHAPES: the real SmolLM2-135M-Instruct and the small synthetic MoE shape;
# DENSE_SHAPE: the Qwen3-8B shape; MOE_SHAPE: the Qwen3-30B-A3B shape):
#   1. records: `corun-sglang verify-tiers` and `verify-prefill-pack` write the decode tiers and prefill
#      pack records the served configurations load (with the suite's own server options);
#   2. the suite (tests/gpu/test_suite.py) with the arms side by side, in groups that fit the GPU:
#      default SGLang (radix cache off, greedy), its batch-invariant mode, --corun as shipped (calibrating
#      itself on its first start: CORUN_CALIBRATE=auto), --corun with calibration off, --corun at N = 64;
#      then --corun with the tiers record, with the pack record, with the pack record and a wait, and
#      (MoE) with padding rows through the experts;
#   3. the OpenAI HTTP path (tests/gpu/test_http.py) on the dense shape and on SmolLM2.
# The large MoE shape (61 GB) runs --corun and default SGLang one at a time.
# Rows accumulate in RESULTS_DIR/<lane>/{suite,requests}.jsonl next to each server's log; the report
# reads them all. SUITE_LANES picks lanes (default: small dense moe).
set -uo pipefail
cd "$(dirname "$0")/.."
results="$(realpath -m "${1:-results/determinism}")"
small="${SMALL_SHAPES:-smollm2 qwen3-moe-small}"
dense="${DENSE_SHAPE:-qwen3-8b}"
moe="${MOE_SHAPE:-qwen3-30b-a3b}"
lanes="${SUITE_LANES:-small dense moe}"
server_args="--attention-backend flashinfer --chunked-prefill-size 2048 --load-snapshot-publish-interval 1"
pytest=(python3 -m pytest -v -rA --durations=0 -p no:cacheprovider)
mkdir -p "$results"
status=0

checkpoint() {  # shape -> folder on stdout
    local dest="$results/checkpoints/$1"
    if [ "$1" = smollm2 ]; then
        corun-sglang models smollm2 "$dest" >/dev/null && echo "$dest"
    else
        python3 -m corun_sglang.tools.synthetic "$dest" --shape "$1" --config-only
    fi
}

records() {  # shape -> records in $results/records/<shape>-{tiers,pack}.json
    local ckpt; ckpt="$(checkpoint "$1")" || return 1
    mkdir -p "$results/records"
    corun-sglang verify-tiers --model-path "$ckpt" --candidates "${TIER_CANDIDATES:-64,128}" \
        --out "$results/records/$1-tiers.json" --server-args "$server_args" --static-gb "${RECORD_STATIC_GB:-40}" \
        > "$results/records/$1-tiers.log" 2>&1 || return 1
    corun-sglang verify-prefill-pack --model-path "$ckpt" --pack "${PACK:-1024}" \
        --out "$results/records/$1-pack.json" --server-args "$server_args" --static-gb "${RECORD_STATIC_GB:-40}" \
        > "$results/records/$1-pack.log" 2>&1
}

suite() {  # lane-name shape arms static-gb [pytest args...]
    local lane=$1 shape=$2 arms=$3 gb=$4; shift 4
    mkdir -p "$results/$lane"
    CORUN_RESULTS="$results/$lane" CORUN_SUITE_SHAPES="$shape" CORUN_SUITE_ARMS="$arms" CORUN_SUITE_STATIC_GB="$gb" \
        CORUN_CALIBRATE=auto CORUN_SGLANG_CACHE="$results/cache" \
        CORUN_CHECKPOINTS="$results/checkpoints" CORUN_SUITE_SERVER_ARGS="--attention-backend flashinfer" \
        CORUN_SUITE_TIERS_RECORD="$results/records/$shape-tiers.json" \
        CORUN_SUITE_PACK_RECORD="$results/records/$shape-pack.json" \
        "${pytest[@]}" tests/gpu/test_suite.py "$@" > "$results/$lane.log" 2>&1 || status=1
}

http() {  # lane-name shape
    mkdir -p "$results/$1"
    local ckpt; ckpt="$(checkpoint "$2")" || { status=1; return; }
    CORUN_RESULTS="$results/$1" CORUN_SHAPE="$2" CORUN_CHECKPOINT="$ckpt" CORUN_STATIC_GB=24 \
        CORUN_SERVER_ARGS="--attention-backend flashinfer" \
        "${pytest[@]}" tests/gpu/test_http.py > "$results/$1.log" 2>&1 || status=1
}

for lane in $lanes; do
    case $lane in
        small)
            for shape in $small; do
                records "$shape" || status=1
                extra=""; [ "$shape" = qwen3-moe-small ] && extra=",corun-moe-compute"
                suite "$shape" "$shape" "default,deterministic,corun,corun-nocal,corun-n64,corun-tiers,corun-pack,corun-pack-wait$extra" 12
            done
            http http-smollm2 smollm2 ;;
        dense)
            records "$dense" || status=1
            suite "$dense-a" "$dense" default,deterministic,corun,corun-nocal 30
            suite "$dense-n" "$dense" corun-n64 30
            suite "$dense-b" "$dense" corun-tiers,corun-pack,corun-pack-wait 36
            http "http-$dense" "$dense" ;;
        moe)
            suite "$moe-corun" "$moe" corun 90
            suite "$moe-default" "$moe" default 90 -k "test_a or test_b or test_d or test_i" ;;
    esac
done

python3 scripts/determinism_report.py "$results" --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    --command "scripts/determinism_suite.sh ${1:-}" \
    --host "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)" || status=1
exit $status
