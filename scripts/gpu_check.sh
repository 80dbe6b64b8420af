#!/usr/bin/env bash
# The GPU checks of the current code in one command, on a host with one GPU and SGLang 0.5.17 installed
# (with the project importable, e.g. PYTHONPATH=/tmp/site:$PWD): a --corun server starts and serves
# (test_server), the core determinism test with default SGLang as its negative control
# (test_determinism), and the malformed-request corpus against a live --corun server while seeded
# co-runners decode (test_malformed_on_gpu). Logs and JSON results go to RESULTS_DIR.
# usage: [TESTS="tests/gpu/..."] scripts/gpu_check.sh [RESULTS_DIR]
# (the default set takes about 8 minutes on an H200 with prebuilt kernels; TESTS picks other GPU tests,
# e.g. TESTS=tests/gpu/test_contract_on_gpu.py for the fingerprint, replay and unseeded-group checks)
set -uo pipefail
cd "$(dirname "$0")/.."
results="$(realpath -m "${1:-results/gpu_check}")"
mkdir -p "$results"
{
    echo "commit: ${CORUN_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"  # CORUN_COMMIT: a copied tree's
    nvidia-smi --query-gpu=name,memory.total,uuid,driver_version --format=csv,noheader
    python3 -c "import torch, sglang, flashinfer; print('torch', torch.__version__, 'sglang', sglang.__version__, 'flashinfer', flashinfer.__version__)"
} > "$results/host.txt" 2>&1
corun-sglang apply-patches > "$results/patches.log" 2>&1 || python3 -m corun_sglang.commands.cli apply-patches >> "$results/patches.log" 2>&1
# Default SGLang's own attention on Hopper is FA3, which the GPU host's wheelhouse brings only with FA3=1:
# every server runs FlashInfer unless CORUN_SERVER_ARGS says otherwise.
CORUN_SERVER_ARGS="${CORUN_SERVER_ARGS---attention-backend flashinfer}" \
CORUN_RESULTS="$results" CORUN_STATIC_GB="${CORUN_STATIC_GB:-40}" PYTHONUNBUFFERED=1 \
    python3 -m pytest -v -rA --durations=0 -p no:cacheprovider \
    ${TESTS:-tests/gpu/test_server.py tests/gpu/test_determinism.py tests/gpu/test_malformed_on_gpu.py} \
    2>&1 | tee "$results/pytest.log"
exit "${PIPESTATUS[0]}"
