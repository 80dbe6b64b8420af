#!/usr/bin/env bash
# Apply corun-sglang's patch series to the installed SGLang 0.5.17.
# usage: scripts/apply_patches.sh [--check|--revert]
# Same as `corun-sglang apply-patches`; uses the python3 on PATH (or $PYTHON).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python3}" -m corun_sglang apply-patches "$@"
