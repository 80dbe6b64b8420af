"""Request-check adapters: every generate request is checked in the tokenizer process (``requests_check``),
before SGLang validates it and before anything reaches the scheduler; a refusal is a ``ValueError``, which
SGLang's HTTP server answers with a 400.

The refused parameters a GPU queue chunk measures, and the verified ones a server option moves onto an
unmeasured path (``requests_check.CONDITIONS``), are served only by a server started with ``--corun-measure``
naming them (``CorunConfig.measured``: the chunk's servers).
"""

from __future__ import annotations

import dataclasses
import logging

from corun_sglang.core import requests_check
from corun_sglang.serving.adapters import state

logger = logging.getLogger(__name__)


def measured() -> frozenset:
    """The refused parameters this server serves for a GPU queue chunk that measures them (usually none)."""
    return frozenset(state.config().measured)


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}


@state.corun_only
def check_request(original, self, obj, input_ids, *args, **kwargs):
    """Each generate request (each prompt of a batch, before its n > 1 children exist) is checked against
    ``requests_check`` before SGLang validates it and before anything reaches the scheduler; a refusal is
    a ``ValueError``, which SGLang's HTTP server answers with a 400."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    if isinstance(obj, GenerateReqInput):
        requests_check.check(
            _fields(obj), obj.sampling_params, None if input_ids is None else len(input_ids),
            preferred=getattr(self, "preferred_sampling_params", None), measured=measured(),
            has_tokenizer=not self.server_args.skip_tokenizer_init,
            options={c.option: getattr(self.server_args, c.option, None) for c in requests_check.CONDITIONS},
        )
    return original(self, obj, input_ids, *args, **kwargs)


@state.corun_only
def check_n(original, self, *args, **kwargs):
    """A generate request's ``n`` is an integer of 1 or more before SGLang expands it into children."""
    problem = requests_check.n_problem(self.sampling_params)
    if problem:
        raise requests_check.RequestRefused([problem])
    return original(self, *args, **kwargs)
