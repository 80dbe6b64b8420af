"""Thin hook adapters, one module per concern; each adapter is named once in ``hooks.HOOKS``.

Every adapter reads SGLang state, hands the decision to a pure function (``policy``, ``packing``,
``decode_grid``, ``moe_padding``, ``prefix_cache``, ``seeds``, ``requests_check``, ``reservations``, ``records``,
``fingerprint``, ``responses``) and acts on the answer. Without ``--corun`` each is a pass-through: SGLang behaves as it does without corun-sglang.
State an adapter keeps about an SGLang object lives in a ``weakref.WeakKeyDictionary`` (or, for objects
that do not hash, a ``state.IdentityMap``) of the module that owns it, never on the object.

- ``state``: what every adapter reads (this process's configuration, a request's reservation);
- ``startup``: the scheduler's start (its check, its GEMM library), the decode graph runner's sizes and records;
- ``admission``: chunk budget, full-sequence admission, the prefill pack wait, no retraction,
  the default ``max_new_tokens``;
- ``prefill``: packed prefill (graphs, replay, eager stop, plans, LM head rows);
- ``prefix``: the deterministic prefix cache (grid hits, stored tails, their eviction and counts);
- ``decode``: fixed-shape decode without split-KV, the surplus blocks of a graph's plan;
- ``moe``: MoE padding rows kept out of the experts;
- ``seeds``: request-bound seeds, in the batch and per request, ``n > 1`` children;
- ``requests``: the tokenizer-side request check;
- ``contract``: ``system_fingerprint`` and each sample's seed on every response, and on ``/server_info``;
- ``operations``: reservations and ``corun_`` metrics, contract stops.
"""
