"""What a ``--corun`` response carries besides its output: the server's ``system_fingerprint`` and the seed
each sample was drawn from.

- native ``/generate``: ``meta_info["system_fingerprint"]`` and ``meta_info["sampling_seed"]``;
- OpenAI completions and chat completions: ``system_fingerprint`` on the response and on every streamed
  chunk (as OpenAI sends it), and ``sampling_seed`` on every choice (``choices[i].sampling_seed``; each
  sample of ``n > 1`` has its own).

Sending a choice's ``sampling_seed`` back as ``seed`` (OpenAI) or ``sampling_seed`` (native), with the same
prompt and parameters and ``n = 1``, to a server of the same fingerprint gives that sample again, bit for
bit.

Pure functions over dicts and text; nothing here imports SGLang.

Invariants:
- stamping adds ``system_fingerprint`` and ``sampling_seed`` and changes nothing else;
- ``stamp_event`` rewrites only completion and chat-completion chunks (``CHUNK_OBJECTS``); any other
  server-sent event (an error, ``[DONE]``) passes unchanged; the values of a rewritten chunk are unchanged
  (JSON floats round-trip exactly).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

FINGERPRINT = "system_fingerprint"
SEED = "sampling_seed"

#: The ``object`` of the streamed chunks that carry choices.
CHUNK_OBJECTS = ("text_completion", "chat.completion.chunk")

_DATA = "data: "


def stamp_meta(meta_info: dict, fingerprint: str | None, seed: int | None) -> dict:
    """``meta_info`` with the server's ``fingerprint`` and the request's ``seed`` (None: not known)."""
    meta_info[FINGERPRINT] = fingerprint
    meta_info[SEED] = seed
    return meta_info


def complete_logprobs(meta_info: dict) -> dict:
    """``meta_info`` with ``input_top_logprobs`` None where it holds prompt logprobs but no top logprobs: SGLang
    0.5.17 writes the key only for top logprobs, yet its OpenAI completions read it whenever ``echo`` asks for
    logprobs, and fail with a server error on ``logprobs: 0`` without it."""
    if "input_token_logprobs" in meta_info:
        meta_info.setdefault("input_top_logprobs", None)
    return meta_info


def stamp_event(event: str, fingerprint: str | None, seeds: Mapping[str, int]) -> str:
    """A server-sent ``data:`` event of an OpenAI stream with ``fingerprint`` on the chunk and, on each choice,
    the seed of the request the chunk comes from (``seeds``: by the chunk's ``id``, SGLang's request id)."""
    if not event.startswith(_DATA + "{"):
        return event
    body = event[len(_DATA):]
    end = body.rstrip("\n")
    try:
        chunk = json.loads(end)
    except ValueError:
        return event
    if not isinstance(chunk, dict) or chunk.get("object") not in CHUNK_OBJECTS:
        return event
    chunk[FINGERPRINT] = fingerprint
    seed = seeds.get(chunk.get("id"))
    for choice in chunk.get("choices") or ():
        if isinstance(choice, dict):
            choice[SEED] = seed
    return _DATA + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")) + body[len(end):]


def choice_seeds(ret: list[Mapping[str, Any]]) -> list[int | None]:
    """The seed of each choice of a non-streamed OpenAI response built from ``ret`` (choice ``i`` from
    ``ret[i]``, as SGLang builds them)."""
    return [(item.get("meta_info") or {}).get(SEED) for item in ret]
