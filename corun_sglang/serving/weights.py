"""A digest of a model's loaded weights: the bits of every parameter, on the device that holds them.

``checksum(t)`` reads ``t``'s raw bytes as little-endian 64-bit words ``w_j`` (the last one zero-padded)
and sums ``mix(w_j + j * GOLDEN)`` modulo 2**64, where ``mix`` is SplitMix64's finalizer (a bijection of
64-bit words). It runs where the tensor lives, in chunks of ``CHUNK`` words, so a GPU digests a model in a
fraction of a second. ``digest`` is SHA-256 over each parameter's name, dtype, shape and checksum.

Invariants:
- one flipped bit, or two swapped words, changes a tensor's checksum (``mix`` is a bijection and positions
  are mixed in); a checkpoint of other weights (a fine-tune of the same architecture) digests to another
  value except with probability about 2**-64 per tensor. It is a checksum against accidental change, not
  a cryptographic hash against a forger;
- the same bits, names, dtypes and shapes give the same digest on every run and device kind;
- nothing here changes a tensor.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

import torch

#: Words a checksum reads per step (32 MiB of int64 temporaries each).
CHUNK = 1 << 22

_MASK = (1 << 64) - 1


def _int64(value: int) -> int:
    """``value`` modulo 2**64, as the int64 with those bits."""
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _int64(0x9E3779B97F4A7C15)
_M1 = _int64(0xBF58476D1CE4E5B9)
_M2 = _int64(0x94D049BB133111EB)


def _shift(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 words."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mixed_sum(words: torch.Tensor, first: int) -> torch.Tensor:
    """Sum (modulo 2**64, as int64) of ``mix(w_j + j * GOLDEN)`` over ``words``, numbered from ``first``."""
    index = torch.arange(first, first + words.numel(), device=words.device, dtype=torch.int64)
    x = words + index * _GOLDEN
    x = (x ^ _shift(x, 30)) * _M1
    x = (x ^ _shift(x, 27)) * _M2
    x = x ^ _shift(x, 31)
    return x.sum(dtype=torch.int64)


def checksum(tensor: torch.Tensor) -> int:
    """The 64-bit checksum of ``tensor``'s raw bits (module docstring), computed on its device."""
    raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    whole = raw.numel() // 8 * 8
    words = raw[:whole].view(torch.int64)
    total = torch.zeros((), dtype=torch.int64, device=raw.device)
    for start in range(0, words.numel(), CHUNK):
        total = total + _mixed_sum(words[start:start + CHUNK], start)
    if whole < raw.numel():
        tail = torch.zeros(8, dtype=torch.uint8, device=raw.device)
        tail[: raw.numel() - whole] = raw[whole:]
        total = total + _mixed_sum(tail.view(torch.int64), words.numel())
    return int(total.item()) & _MASK


def digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 (16 hex digits) over each named tensor's name, dtype, shape and ``checksum``, by name."""
    h = hashlib.sha256()
    for name, tensor in sorted(named, key=lambda item: item[0]):
        h.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|{checksum(tensor):016x}\n".encode())
    return h.hexdigest()[:16]


def of_model(model: torch.nn.Module) -> str:
    """The ``digest`` of every parameter of ``model`` (a TP rank's: its shard)."""
    return digest(model.named_parameters())
