"""Adapters at start: a ``--corun`` scheduler re-checks its process and runs its GEMMs through the configured
library (``CorunConfig.gemm_library``); the decode graph runner holds exactly the configured graphs, and every
record served holds in this environment (``environment.foreign``)."""

from __future__ import annotations

import logging

from corun_sglang.records import environment
from corun_sglang.records.record import pack_candidate_line
from corun_sglang.serving.adapters import state
from corun_sglang.serving.startup import check_startup
from corun_sglang.core.stops import CorunContractError

logger = logging.getLogger(__name__)


@state.corun_only
def scheduler_init(original, self, server_args, *args, **kwargs):
    """Scheduler start: a ``--corun`` scheduler re-checks its own process and sets its GEMM library
    (``CorunConfig.gemm_library``) before it loads weights, so every GEMM it runs, captured or not, goes
    through that library."""
    import torch

    check_startup()
    cfg = state.config()
    torch.backends.cuda.preferred_blas_library(cfg.gemm_library)
    logger.info("corun scheduler: %s", cfg.summary())
    return original(self, server_args, *args, **kwargs)


@state.corun_only_after
def decode_graph_runner_init(result, self, model_runner, *args, **kwargs):
    """After the decode CUDA-graph runner is built: it holds the graphs of N and of the decode tiers, no
    other, and every record served (decode tiers, prefill pack) was verified in this environment. A server
    serving unverified candidates logs its environment (and its pack) for the verifier to read back."""
    cfg = state.config()
    if list(self.capture_bs) != cfg.decode_sizes:
        raise CorunContractError(
            f"decode CUDA graphs resolved to batch sizes {list(self.capture_bs)}, not {cfg.decode_sizes}: "
            f"the request pool holds {model_runner.req_to_token_pool.size} requests. "
            f"Fix: lower --max-running-requests to at most that, or give the KV cache "
            f"more memory (--mem-fraction-static)"
        )
    served = cfg.served_records()
    if not served:
        return result
    env = state.environment(model_runner)
    if any(item.record is None for item in served):  # unverified candidates: tell the verifier where they ran
        logger.warning(environment.environment_line(env))
    if cfg.prefill_pack is not None and cfg.pack_record is None:
        logger.warning(pack_candidate_line(cfg.prefill_pack, cfg.prefill_pack_shortest, cfg.prefill_pack_kernel))
    problem = environment.foreign(served, env)
    if problem:
        raise CorunContractError(problem)
    return result

