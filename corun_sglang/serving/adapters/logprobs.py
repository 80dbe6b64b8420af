"""Logprob adapters: under ``--corun`` a request's top-k logprobs, ties included, depend on its own row, and
a batch that mixes ``token_ids_logprob`` requests with requests without it is served.

SGLang's two top-k helpers (``get_top_logprobs_raw``: the sampled position of every request, decode and
prefill; ``get_top_logprobs_chunk``: the prompt positions of a prefill, packed prompts together) run one
``torch.topk`` at the largest k of the rows they hold and hand each request its first k. Their one read
of the logprobs is that ``topk``; under ``--corun`` it is answered by ``ranking.top``, whose order
(value descending, token id ascending) each row fixes alone, so neither the batch's largest k nor its
shape picks which of equal values comes first. SGLang's own bookkeeping (which rows belong to which
request, how many each asked for) runs unchanged.

Invariants:
- under ``--corun`` every top-k these helpers return is ``ranking.top`` of the same rows: the values
  are ``torch.topk``'s, bit for bit, and the ids of equal values ascend;
- a helper that reads anything of the logprobs but ``topk(k, dim)`` over its last dimension stops the
  server (``CorunContractError``): it would run on rows no ranking covers;
- under ``--corun`` every entry of ``get_token_ids_logprobs``'s values kept on the device is a tensor: a row
  that asked for no token ids gets an empty one, where SGLang writes a bare ``[]`` that its result processors
  then call ``.tolist()`` on (the scheduler dies on any batch that mixes the two). The values of the rows that
  asked are SGLang's own gather, untouched;
- without ``--corun`` the helpers run as SGLang ships them.
"""

from __future__ import annotations

import collections

import torch

from corun_sglang.core import ranking
from corun_sglang.serving.adapters import state
from corun_sglang.core.stops import CorunContractError

#: What ``torch.topk`` returns, as far as SGLang's helpers read it (unpacked, or ``.values`` / ``.indices``).
TopK = collections.namedtuple("TopK", ["values", "indices"])


class Ranked:
    """A logprobs tensor as SGLang's top-k helpers read it: its ``topk`` is ``ranking.top``."""

    __slots__ = ("logprobs",)

    def __init__(self, logprobs):
        self.logprobs = logprobs

    def topk(self, k, dim=-1, largest=True, sorted=True):
        rows = self.logprobs
        if rows.dim() != 2 or dim not in (-1, 1) or not largest or not sorted:
            raise CorunContractError(
                f"SGLang's top-k logprobs asked for topk(k={k}, dim={dim}, largest={largest}, sorted={sorted}) "
                f"of {rows.dim()}-D logprobs; --corun ranks the last dimension of 2-D rows only. Fix: "
                "corun-sglang is written against SGLang 0.5.17; reinstall it")
        return TopK(*ranking.top(rows, int(k)))

    def __getattr__(self, name):
        raise CorunContractError(
            f"SGLang's top-k logprobs read '{name}' of the logprobs, not only topk; --corun cannot vouch for "
            "that order. Fix: corun-sglang is written against SGLang 0.5.17; reinstall it")


@state.corun_only
def ranked_top_logprobs(original, *args, **kwargs):
    """SGLang's ``get_top_logprobs_raw`` and ``get_top_logprobs_chunk``, their ``topk`` answered by
    ``ranking.top`` under ``--corun``."""
    bound = state.bind(original, *args, **kwargs)
    bound.arguments["logprobs"] = Ranked(bound.arguments["logprobs"])
    return original(*bound.args, **bound.kwargs)


@state.corun_only
def tensor_token_ids_logprobs(original, *args, **kwargs):
    """SGLang's ``get_token_ids_logprobs`` with an empty tensor, not ``[]``, for each row that asked for no token
    ids, where it keeps the values on the device (``no_copy_to_cpu``) under ``--corun``."""
    vals, idxs = original(*args, **kwargs)
    bound = state.bind(original, *args, **kwargs)
    bound.apply_defaults()
    if bound.arguments["no_copy_to_cpu"]:
        logprobs = bound.arguments["logprobs"]
        vals = [v if torch.is_tensor(v) else logprobs.new_empty((0,)) for v in vals]
    return vals, idxs
