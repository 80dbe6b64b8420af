"""The ``corun`` sampling backend: SGLang's ``Sampler`` with request-bound draws.

Registered with SGLang's ``register_sampler_backend`` and selected by
``--corun`` (``--sampling-backend corun``). Invariants, for every row:
- the token is ``sampling_kernels.sample`` of that row's logits, temperature, top-k/top-p/
  min-p, seed and position, whatever the rest of the batch is (there is no
  batch-wide choice of sampling path: greedy, plain and filtered rows all go
  through the same kernel);
- returned logprobs are ``log_softmax(logits / T)`` (T = 1 for greedy rows),
  computed the same way whatever the batch holds and whichever slot the row
  takes (``sampling_kernels.softmax_rows``).
"""

from __future__ import annotations

import torch
from sglang.srt.layers.sampler import SGLANG_RETURN_ORIGINAL_LOGPROB, Sampler

from corun_sglang.serving import sampling_kernels

BACKEND = "corun"


class CorunSampler(Sampler):
    def forward(
        self,
        logits_output,
        sampling_info,
        return_logprob: bool,
        top_logprobs_nums,
        token_ids_logprobs,
        positions: torch.Tensor,
    ):
        if sampling_info.sampling_seed is None:
            raise RuntimeError(
                "corun sampler: the batch carries no request seeds "
                "(SamplingBatchInfo.adjusted_from_schedule_batch is not hooked)"
            )
        logits = self._preprocess_logits(logits_output.next_token_logits, sampling_info)
        ids = sampling_kernels.sample(
            logits,
            sampling_info.temperatures,
            sampling_info.sampling_seed,
            positions,
            sampling_info.top_ks,
            sampling_info.top_ps,
            sampling_info.min_ps,
            need_top_k=sampling_info.need_top_k_sampling,
            need_top_p=sampling_info.need_top_p_sampling,
            need_min_p=sampling_info.need_min_p_sampling,
        )
        needs_mask = any(sampling_info.return_sampling_masks or [])
        if return_logprob or needs_mask:
            scaled = logits.float() / sampling_info.temperatures.view(-1, 1)
            if needs_mask:
                probs = sampling_kernels.softmax_rows(scaled)
                self._attach_sampling_mask_to_output(
                    logits_output, sampling_info, ids,
                    self._compute_sampling_mask_from_probs(probs, sampling_info),
                )
                del probs
            if return_logprob:
                logprobs = sampling_kernels.softmax_rows(logits if SGLANG_RETURN_ORIGINAL_LOGPROB else scaled, log=True)
                self.output_logprob_processor.compute_logprobs(
                    logprobs, top_logprobs_nums, token_ids_logprobs, ids
                ).write_output_to(logits_output)
        self._sync_token_ids_across_tp(ids, sampling_info)
        return ids


def register() -> None:
    """Make ``--sampling-backend corun`` create a ``CorunSampler`` (idempotent)."""
    from sglang.srt.layers import sampler as sglang_sampler

    if sglang_sampler._CUSTOM_SAMPLER_FACTORIES.get(BACKEND) is not CorunSampler:
        sglang_sampler.register_sampler_backend(BACKEND, CorunSampler)


def registered() -> bool:
    from sglang.srt.layers import sampler as sglang_sampler

    return sglang_sampler._CUSTOM_SAMPLER_FACTORIES.get(BACKEND) is CorunSampler
