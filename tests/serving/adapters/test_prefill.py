"""``adapters.prefill``: packed prefill (graphs from the pack, replay, the eager stop, plans without split-KV,
LM head rows); plain ``--corun`` without a pack."""

import inspect
import types

import pytest
import torch

from adapters.helpers import PACK
from corun_sglang.serving.adapters import prefill
from corun_sglang.core.stops import CorunContractError


@pytest.mark.parametrize("tokens,replayed", [(33, PACK), (200, PACK), (PACK, PACK), (32, 32), (300, 300)])
def test_a_packable_prefill_replays_the_packs_graph_from_far_below(packing_args, tokens, replayed):
    def original(self, *, num_tokens, **kwargs):
        return num_tokens

    packing_args()
    assert prefill.prefill_replay(original, "runner", num_tokens=tokens, return_logprob=True) == replayed
    packing_args(pack=False)
    assert prefill.prefill_replay(original, "runner", num_tokens=tokens, return_logprob=True) == tokens


def _extend(tokens, prefixes):
    return types.SimpleNamespace(input_ids=torch.zeros(tokens, dtype=torch.long), extend_prefix_lens_cpu=prefixes,
                                 batch_size=len(prefixes))


def test_a_packable_prefill_never_runs_eagerly(packing_args):
    def original(self, forward_batch):
        return "eager"

    packing_args()
    with pytest.raises(CorunContractError, match="3 fresh prompts, 200 tokens.*256-token prefill graph"):
        prefill.eager_prefill(original, "runner", _extend(200, [0, 0, 0]))
    with pytest.raises(CorunContractError, match="1 fresh prompts, 256 tokens"):
        prefill.eager_prefill(original, "runner", _extend(PACK, [0]))
    assert prefill.eager_prefill(original, "runner", _extend(200, [300])) == "eager"  # a later chunk, alone
    assert prefill.eager_prefill(original, "runner", _extend(20, [0])) == "eager"  # shorter than 33
    assert prefill.eager_prefill(original, "runner", _extend(1000, [0])) == "eager"
    packing_args(pack=False)
    assert prefill.eager_prefill(original, "runner", _extend(200, [0, 0, 0])) == "eager"


class _Wrapper:
    """Stands in for a FlashInfer prefill wrapper: records the keywords its plan gets."""

    def __init__(self):
        self.planned = []

    def begin_forward(self, *args, **kwargs):
        self.planned.append(kwargs)


def _plan_signature():
    """The signature of SGLang's own ``call_begin_forward``, which ``prefill_plan`` binds its call to."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterPrefill

    real = FlashInferIndicesUpdaterPrefill.call_begin_forward
    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__
    return inspect.signature(real)


def test_prefill_plans_run_without_split_kv_under_a_pack(packing_args):

    def original(self, wrapper_ragged, wrapper_paged, *args, **kwargs):
        wrapper_ragged.begin_forward("qo", "kv")
        wrapper_paged.begin_forward("qo", "kv", fixed_split_size=None)

    original.__signature__ = _plan_signature()
    ragged, paged = _Wrapper(), _Wrapper()
    call = ("updater", ragged, paged, "idx", "lens", 7, "seq", None, "start", "indptr", "qo", True, None)
    packing_args()
    prefill.prefill_plan(original, *call)
    assert ragged.planned == [{"disable_split_kv": True}]
    assert paged.planned == [{"disable_split_kv": True, "fixed_split_size": None}]
    assert "begin_forward" not in vars(ragged) and "begin_forward" not in vars(paged)  # the methods are back
    packing_args(pack=False)
    prefill.prefill_plan(original, *call)
    assert ragged.planned[-1] == {} and paged.planned[-1] == {"fixed_split_size": None}


def test_prefill_plans_run_without_split_kv_with_tp_invariant_shards(make_args):
    """No plan follows the count of heads a rank holds: split-KV off, as under a pack."""
    from sglang.srt.runtime_context import publish


    def original(self, wrapper_ragged, wrapper_paged, *args, **kwargs):
        wrapper_ragged.begin_forward("qo", "kv")

    original.__signature__ = _plan_signature()
    ragged = _Wrapper()
    publish(make_args(corun=True, corun_tp_invariant=2), role="scheduler")
    prefill.prefill_plan(original, "updater", ragged, _Wrapper(), "idx", "lens", 7, "seq", None, "start", "indptr",
                         "qo", True, None)
    assert ragged.planned == [{"disable_split_kv": True}]


def test_a_pack_set_for_fa3_stops_at_a_prefill_planned_on_another_kernel(packing_args, monkeypatch):
    from corun_sglang.core import packing
    from corun_sglang.serving import kernel_probe

    def original(self, wrapper_ragged, wrapper_paged, *args, **kwargs):
        wrapper_ragged.begin_forward("qo", "kv")

    original.__signature__ = _plan_signature()

    def plan(backend, use_ragged=True):
        ragged = _Wrapper()
        ragged._backend = backend  # what FlashInfer resolves "auto" to at the first plan
        return prefill.prefill_plan(original, "updater", ragged, _Wrapper(), "idx", "lens", 7, "seq", None,
                                     "start", "indptr", "qo", use_ragged, None)

    packing_args()
    plan("fa2")  # the FA2 rule holds on any kernel
    monkeypatch.setattr(kernel_probe, "prefill_kernel", lambda head_dim, dtype, paged: packing.FA3)
    packing_args()
    plan("fa3")
    with pytest.raises(CorunContractError, match="planned on FlashInfer's fa2 kernel.*from 1 tokens"):
        plan("fa2")
    with pytest.raises(CorunContractError, match="paged fa2 kernel.*SGLANG_FLASHINFER_USE_PAGED=1"):
        plan("fa3", use_ragged=False)


def test_a_prefills_lm_head_computes_the_packs_rows_and_returns_its_own(packing_args):
    seen = []

    def original(self, hidden_states, lm_head, embedding_bias=None):
        seen.append(hidden_states.shape[0])
        return hidden_states @ lm_head

    states, head = torch.randn(3, 8), torch.randn(8, 5)
    packing_args()
    logits = prefill.lm_head_rows(original, "processor", states, head)
    assert seen == [PACK] and torch.equal(logits, states @ head)
    prefill.lm_head_rows(original, "processor", torch.randn(300, 8), head)
    assert seen[-1] == 300
    packing_args(pack=False)
    prefill.lm_head_rows(original, "processor", states, head)
    assert seen[-1] == 3


def test_the_prefill_graphs_start_at_the_pack(packing_args):
    runner = types.SimpleNamespace(server_args=packing_args())
    assert prefill.prefill_graph_runner_init("built", types.SimpleNamespace(capture_num_tokens=[256, 512]),
                                              runner) == "built"
    with pytest.raises(CorunContractError, match="needs 256 as the smallest"):
        prefill.prefill_graph_runner_init("built", types.SimpleNamespace(capture_num_tokens=[64, 256]), runner)
    plain = types.SimpleNamespace(server_args=packing_args(pack=False))
    assert prefill.prefill_graph_runner_init("built", types.SimpleNamespace(capture_num_tokens=[64]), plain) == "built"
