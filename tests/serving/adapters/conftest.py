"""Fixtures the adapter tests share: server args published with and without ``--corun`` (and a prefill
pack), and SGLang's own ``TokenizerManager`` without its sockets."""

import types

import pytest
from sglang.srt.runtime_context import publish

from adapters.helpers import PACK


@pytest.fixture
def serving(make_args):
    def publish_args(corun: bool):
        publish(make_args(corun=corun), role="scheduler")

    return publish_args


@pytest.fixture
def packing_args(make_args):
    """Publish ``--corun --corun-prefill-pack-candidate 256`` (or plain ``--corun`` with ``pack=False``)."""
    def publish_args(pack: bool = True, wait: int = 0):
        args = make_args(corun=True, corun_prefill_pack_candidate=PACK if pack else None,
                         corun_prefill_pack_wait=wait)
        publish(args, role="scheduler")
        return args

    return publish_args


@pytest.fixture
def tokenizer_manager(make_args):
    """SGLang's own ``TokenizerManager`` (hooked), built without its IPC sockets, on a byte-level stand-in
    tokenizer (prompts are token ids): what it sends to the scheduler is recorded, and each request
    finishes as soon as it is sent."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    from sglang.srt.sampling.sampling_params import SamplingParams

    def build(corun: bool = True, **options):
        args = make_args(corun=corun, **options)
        publish(args, role="tokenizer")
        tm = TokenizerManager.__new__(TokenizerManager)
        tm.server_args, tm.elastic_worker_count = args, 1
        tm.init_running_status()
        tm.init_request_logging_and_dumping()
        tm.init_weight_update()
        tm.enable_trace = tm.allow_auto_truncate = tm.enable_lora = tm.enable_priority_scheduling = False
        tm.preferred_sampling_params = tm.default_priority_value = tm.mm_processor = None
        tm.tokenizer = types.SimpleNamespace(encode=lambda text, add_special_tokens=False: list(text.encode()))
        tm.context_len, tm.num_reserved_tokens, tm.validate_total_tokens, tm.is_generation = 4096, 0, True, True
        tm.model_config, tm.sampling_params_class = args.get_model_config(), SamplingParams
        tm.disaggregation_mode = None
        tm.sent = []
        tm._dispatch_to_scheduler = tm.sent.append
        tm.auto_create_handle_loop = lambda: None

        async def finished(obj, request=None):
            tm._remove_req_state(obj.rid)
            yield {"meta_info": {"id": obj.rid}}

        tm._wait_one_response = finished
        return tm

    return build
