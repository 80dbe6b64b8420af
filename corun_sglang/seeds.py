"""Request seeds: the seed a request samples from when it brought none, and the seeds of its samples.

Pure functions over integers and token ids; nothing here imports torch or SGLang.

Invariants:
- ``request_seed`` is a pure function of the server's ``--random-seed``, the
  prompt token ids and the sampling parameters that shape the distribution
  (``SEEDED_PARAMS``); it is stable across processes and restarts (no Python
  ``hash``);
- ``child_seed(seed, i)`` gives sample ``i`` of an ``n > 1`` request its own
  seed; distinct ``i`` give distinct seeds;
- every seed lies in ``0 .. SEED_MASK``: it travels as a non-negative int64.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Sequence

#: Seeds are non-negative int64 values (they travel in an int64 tensor).
SEED_MASK = (1 << 63) - 1

#: Sampling parameters that change a request's distribution, hence its derived seed.
SEEDED_PARAMS = ("temperature", "top_p", "top_k", "min_p")


def _digest(*parts: bytes) -> int:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return int.from_bytes(h.digest(), "little") & SEED_MASK


def request_seed(random_seed: int, input_ids: Sequence[int] | None, params: dict) -> int:
    """The seed of a request that brought none: derived from the server seed, the prompt and the parameters."""
    ids = b"".join(struct.pack("<q", int(t)) for t in (input_ids or ()))
    knobs = ";".join(f"{k}={params.get(k)!r}" for k in SEEDED_PARAMS).encode()
    return _digest(b"corun-request", struct.pack("<q", int(random_seed)), ids, knobs)


def child_seed(seed: int, index: int) -> int:
    """The seed of sample ``index`` of a request with ``n > 1`` and seed ``seed``."""
    return _digest(b"corun-child", struct.pack("<qq", int(seed) & SEED_MASK, int(index)))


def params_of(sampling_params) -> dict:
    """The seed-relevant fields of an SGLang ``SamplingParams``."""
    return {k: getattr(sampling_params, k, None) for k in SEEDED_PARAMS}
