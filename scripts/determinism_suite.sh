#!/usr/bin/env bash
# The determinism suite on a GPU host with time to spare: every pending suite chunk of the GPU queue
# (scripts/gpu_queue.toml: the calibrations the suite's --corun arms serve, then the arms of each shape in
# groups that fit one GPU), one after another, each filed under docs/results/suite/ as it ends; then the
# report, docs/results/determinism.md + .json, recounted from the per-request digests of every suite chunk
# committed. The chunks and their arms are defined once, in the queue (docs/gpu_queue.md); a host with
# less time runs them one device call at a time with `scripts/gpu_queue.py call ID`.
# Needs SGLang 0.5.17 and the project installed (the queue's `install` does it on a bare host).
# usage: scripts/determinism_suite.sh [PATTERN...]   (default: every calibrate-*-suite* and suite-* chunk)
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 'calibrate-*-suite*' 'suite-*'
exec python3 scripts/gpu_queue.py local "$@"
