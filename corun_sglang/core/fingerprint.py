"""``system_fingerprint``: one short digest of everything a ``--corun`` server's contract is stated for.

Two servers that give a request (its prompt token ids, parameters and seed) the same fingerprint give it
the same tokens and logprobs; a change to any field below changes the fingerprint. Pure functions over
mappings; nothing here imports SGLang.

The fields (``fields``):
- the record environment (``records.environment``): the model config digest, every ``NUMERIC_OPTIONS``
  server option (the TP size among them), the resolved dtype, the GPU model, CUDA, the BLAS setup and the
  versions of torch, SGLang, FlashInfer, corun-sglang and the kernels they use;
- the weights: each TP rank's ``weights.of_model`` digest of its shard, in rank order (every rank of a
  ``--corun`` server runs on one host, so the engine hears from all of them);
- the resolved configuration (``configuration``): N, the decode tiers, the prefill batch, graph and pack,
  the chunk size, MoE padding, ``--random-seed``, the default ``max_new_tokens``, the shard count of
  ``--corun-tp-invariant``, and whether each record served was verified.

What turns text into prompt token ids (the tokenizer, a chat template) is not a field: a request's prompt
token ids are its own (``return_prompt_token_ids`` shows them).

Invariants:
- ``system_fingerprint`` is ``fp_`` and 12 hex digits of SHA-256 over the fields as sorted JSON;
- equal fields give equal fingerprints in every process; the fields hold JSON scalars and lists only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

#: The prefix OpenAI's ``system_fingerprint`` values carry.
PREFIX = "fp_"


def configuration(cfg: Any) -> dict[str, Any]:
    """The resolved ``--corun`` configuration of ``cfg`` (a ``config.CorunConfig``) that can change a
    request's tokens or logprobs, with its records and whether each was verified."""
    grid = getattr(cfg, "prefix_grid", None)
    return {
        **({} if grid is None else {"prefix cache grid": grid}),
        **({"unverified request parameters": list(cfg.measured)} if getattr(cfg, "measured", ()) else {}),
        **({"tp invariant shards": cfg.tp_invariant} if getattr(cfg, "tp_invariant", None) else {}),
        "N": cfg.decode_batch_size,
        "decode tiers": list(cfg.decode_tiers),
        "decode tiers verified": cfg.decode_tiers_verified,
        "prefill requests per batch": cfg.prefill_requests_per_batch,
        "prefill graph": cfg.prefill_graph,
        "prefill graph sizes": None if cfg.prefill_graph_sizes is None else list(cfg.prefill_graph_sizes),
        "chunked prefill size": cfg.chunked_prefill_size,
        "page size": cfg.page_size,
        "attention backend": cfg.attention_backend,
        "sampling backend": cfg.sampling_backend,
        "random seed": cfg.random_seed,
        "moe padding": cfg.moe_padding,
        "prefill pack": cfg.prefill_pack,
        "prefill pack shortest": cfg.prefill_pack_shortest,
        "prefill pack kernel": cfg.prefill_pack_kernel,
        "prefill pack verified": cfg.prefill_pack_verified,
        "default max new tokens": cfg.default_max_new_tokens,
        "records": {item.option: (None if item.record is None else str(item.record.source))
                    for item in cfg.served_records()},
    }


def fields(environment: Mapping[str, Any], configuration: Mapping[str, Any],
           weights: Sequence[str]) -> dict[str, Any]:
    """Everything the fingerprint digests: the record ``environment``, the TP ranks' ``weights`` digests in
    rank order and the resolved ``configuration`` (the record paths in it left out: a record is its
    environment, which the server's equals)."""
    return {
        **{f"environment {k}": v for k, v in environment.items()},
        "weights": list(weights),
        **{f"corun {k}": v for k, v in configuration.items() if k != "records"},
    }


def system_fingerprint(digested: Mapping[str, Any]) -> str:
    """``fp_`` and 12 hex digits of SHA-256 over ``digested`` (``fields``) as sorted JSON."""
    text = json.dumps(dict(digested), sort_keys=True, separators=(",", ":"), default=str)
    return PREFIX + hashlib.sha256(text.encode()).hexdigest()[:12]
