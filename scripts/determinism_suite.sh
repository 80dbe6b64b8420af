#!/usr/bin/env bash
# The determinism suite on a GPU host, then its report (docs/results/determinism.md + .json).
# usage: scripts/determinism_suite.sh [RESULTS_DIR]
# Environment: see tests/gpu/test_suite.py (CORUN_SUITE_SHAPES, CORUN_SUITE_ARMS, CORUN_SUITE_STATIC_GB, ...)
# and tests/gpu/conftest.py (CORUN_SHAPE and CORUN_WEIGHTS for the HTTP path). Rows accumulate in
# RESULTS_DIR/suite.jsonl, so several invocations (one arm each, for a large model) add up in one report.
set -uo pipefail
cd "$(dirname "$0")/.."
results="${1:-results/determinism}"
mkdir -p "$results"
CORUN_RESULTS="$results" python3 -m pytest -v tests/gpu/test_suite.py tests/gpu/test_http.py
status=$?
python3 scripts/determinism_report.py "$results" \
    --command "scripts/determinism_suite.sh $results" \
    --host "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
exit $status
