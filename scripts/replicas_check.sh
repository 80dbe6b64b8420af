#!/usr/bin/env bash
# Two --corun replicas behind SGLang's router on one GPU, in one command (bench/replicas.py says what it
# checks): every request routed under each policy, with a replica killed mid-run and after its restart,
# must give the bits a single server gives it. Needs SGLang 0.5.17, the project and its router extra
# (`pip install ".[router]"`) on a host with one GPU. Results: RESULTS_DIR/replicas.json (a row per
# request: digests, first divergent step, replica, attempts) and the servers' and routers' logs.
# usage: scripts/replicas_check.sh [RESULTS_DIR] [bench.replicas options, e.g. --shape qwen3-8b]
set -uo pipefail
cd "$(dirname "$0")/.."
results="$(realpath -m "${1:-results/replicas}")"
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$results"
{
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    nvidia-smi --query-gpu=name,memory.total,uuid,driver_version --format=csv,noheader
    python3 -c "import sglang, sglang_router; print('sglang', sglang.__version__, 'sglang-router', sglang_router.__version__)"
} > "$results/host.txt" 2>&1
corun-sglang apply-patches > "$results/patches.log" 2>&1 || python3 -m corun_sglang.commands.cli apply-patches >> "$results/patches.log" 2>&1
PYTHONUNBUFFERED=1 python3 -m bench.replicas --out "$results" "$@" 2>&1 | tee "$results/replicas.log"
exit "${PIPESTATUS[0]}"
