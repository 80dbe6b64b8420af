"""Request seeds: the seed a request samples from when it brought none, and the seeds of its samples.

Nothing here imports torch or SGLang.

Invariants:
- ``content_digest`` is a pure function of a request's prompt token ids and every sampling parameter
  but its seed (``params_of``); it is stable across processes and restarts (no Python ``hash``);
- ``request_seed(random_seed, content, k)`` is the seed of the ``k``-th unseeded request of that content a
  server received (k counted from 0 by ``Occurrences``): identical unseeded requests get distinct seeds,
  and a fresh server with the same ``--random-seed`` that receives them again gives them the same seeds;
- ``child_seed(seed, i)`` gives sample ``i`` of an ``n > 1`` request its own seed; distinct ``i`` give
  distinct seeds;
- every seed lies in ``0 .. SEED_MASK``: it travels as a non-negative int64.
"""

from __future__ import annotations

import collections
import hashlib
import json
import struct
from typing import Any, Mapping, Sequence

#: Seeds are non-negative int64 values (they travel in an int64 tensor).
SEED_MASK = (1 << 63) - 1

#: How many distinct contents ``Occurrences`` counts at once (the least recently received is forgotten
#: past it); about 100 bytes each.
OCCURRENCE_BOUND = 1 << 18


def _digest(*parts: bytes) -> int:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return int.from_bytes(h.digest(), "little") & SEED_MASK


def _canonical(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return repr(value)


def content_digest(input_ids: Sequence[int] | None, params: Mapping[str, Any]) -> bytes:
    """A digest of what a request asks for: its prompt token ids and its sampling parameters (``params_of``)."""
    h = hashlib.blake2b(digest_size=16)
    ids = b"".join(struct.pack("<q", int(t)) for t in (input_ids or ()))
    for part in (b"corun-content", ids, json.dumps(dict(params), sort_keys=True, default=_canonical).encode()):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.digest()


def request_seed(random_seed: int, content: bytes, occurrence: int = 0) -> int:
    """The seed of the ``occurrence``-th unseeded request of ``content`` (``content_digest``) a server
    started with ``random_seed`` received."""
    return _digest(b"corun-request", struct.pack("<qq", int(random_seed), int(occurrence)), content)


def child_seed(seed: int, index: int) -> int:
    """The seed of sample ``index`` of a request with ``n > 1`` and seed ``seed``."""
    return _digest(b"corun-child", struct.pack("<qq", int(seed) & SEED_MASK, int(index)))


def params_of(sampling_params) -> dict:
    """Every field of an SGLang ``SamplingParams`` but its seed (a msgspec struct: its ``__struct_fields__``)."""
    names = getattr(sampling_params, "__struct_fields__", None) or tuple(vars(sampling_params))
    return {name: getattr(sampling_params, name, None) for name in names if name != "sampling_seed"}


class Occurrences:
    """How many unseeded requests of each content a server received: ``next(content)`` is 0 for the first,
    1 for the second, ...

    Exact for up to ``bound`` distinct contents. Past it, the content received least recently is forgotten:
    a later request of it counts from 0 again and so repeats the first seed of its kind. A rerun that sends
    the same requests in the same order still gets the same seeds, since what is forgotten depends on the
    order of requests alone."""

    def __init__(self, bound: int = OCCURRENCE_BOUND):
        if bound < 1:
            raise ValueError("Occurrences counts at least one content")
        self.bound = bound
        self._counts: collections.OrderedDict[bytes, int] = collections.OrderedDict()

    def next(self, content: bytes) -> int:
        """The number of earlier requests of ``content`` still counted, counting this one."""
        seen = self._counts.pop(content, 0)
        self._counts[content] = seen + 1
        if len(self._counts) > self.bound:
            self._counts.popitem(last=False)
        return seen

    def __len__(self) -> int:
        return len(self._counts)
