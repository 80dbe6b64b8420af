"""``adapters.contract`` as clients see it: the scheduler's init info and ``/server_info`` carry the contract,
and every response carries ``system_fingerprint`` and each sample's seed; SGLang's own without --corun."""

import types

import pytest
import torch

from adapters.helpers import _generate, _Manager
from corun_sglang.core.stops import CorunContractError


def _answering(tm):
    """``tm`` answers each request it sends as a scheduler would: two output tokens, finished (SGLang's own
    ``_wait_one_response`` hands them on)."""
    from sglang.srt.managers.io_struct import BatchTokenizedGenerateReqInput

    def answer(obj):
        tm.sent.append(obj)
        for one in obj.batch if isinstance(obj, BatchTokenizedGenerateReqInput) else [obj]:
            state = tm.rid_to_state[one.rid]
            seed = one.sampling_params.sampling_seed
            state.out_list.append({"text": f"s{seed % 97}", "output_ids": [seed % 97, 1], "meta_info": {
                "id": one.rid, "finish_reason": {"type": "length", "length": 2}, "prompt_tokens": len(one.input_ids),
                "completion_tokens": 2, "reasoning_tokens": 0, "cached_tokens": 0, "weight_version": "default"}})
            state.finished = True
            state.event.set()  # the state stays: SGLang drops it later, from its output loop

    tm._dispatch_to_scheduler = answer
    del tm._wait_one_response  # SGLang's own, hooked
    tm.incremental_streaming_output = False
    return tm


class _InitResult(types.SimpleNamespace):
    """What the engine hands the tokenizer process of its schedulers (SGLang's ``SchedulerInitResult``)."""


def _started_scheduler(args, model, tp_rank=0):
    """SGLang's own ``Scheduler`` (hooked), as far as ``get_init_info`` and the contract read it after start, in
    a process that published ``args`` (as a scheduler process does)."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.runtime_context import publish

    publish(args, role="scheduler")
    scheduler = Scheduler.__new__(Scheduler)
    scheduler.server_args = args
    scheduler.max_total_num_tokens, scheduler.max_req_input_len, scheduler.startup_time = 1000, 900, {}
    scheduler.ps = types.SimpleNamespace(tp_rank=tp_rank)
    config = types.SimpleNamespace(hf_config=types.SimpleNamespace(to_dict=lambda: {"hidden_size": 16}),
                                   dtype=torch.bfloat16)
    scheduler.tp_worker = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(model=model, model_config=config, server_args=args))
    return scheduler


def _fingerprinted(make_args, tm=None, models=None, **options):
    """The init info of one scheduler per model in ``models`` (TP ranks 0, 1, ...) handed to ``tm``."""
    from corun_sglang.serving.adapters import contract

    args = make_args(corun=True, **options)
    models = models or [torch.nn.Linear(4, 4)]
    infos = [_started_scheduler(args, m, rank).get_init_info() for rank, m in enumerate(models)]
    _tokenizer_process(args if tm is None else tm.server_args)
    contract.hand_over(None, tm if tm is not None else _Manager(), _InitResult(scheduler_infos=infos))
    return infos


def _tokenizer_process(args):
    """This process, as the tokenizer process of a server of ``args`` (it published them)."""
    from sglang.srt.runtime_context import publish

    publish(args, role="tokenizer")


def test_the_scheduler_init_info_carries_the_contract_and_server_info_shows_its_fingerprint(make_args):
    from corun_sglang.serving.adapters import contract

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    (info,) = _fingerprinted(make_args, models=[model])
    assert info["status"] == "ready" and info["max_req_input_len"] == 900  # SGLang's own info, kept
    shown = info[contract.INFO]
    assert shown["system_fingerprint"].startswith("fp_") and shown["tp_size"] == 1
    assert shown["configuration"]["N"] == 256 and shown["configuration"]["decode tiers verified"] is False
    assert shown["environment"]["model"] and shown["environment"]["tp_size"] == 1
    again = _fingerprinted(make_args, models=[model])[0][contract.INFO]["system_fingerprint"]
    assert again == shown["system_fingerprint"]  # another server of this configuration
    assert _fingerprinted(make_args, models=[model], max_running_requests=64)[0][contract.INFO][
        "system_fingerprint"] != again  # another N
    tuned = torch.nn.Linear(4, 4)
    tuned.load_state_dict(model.state_dict())
    with torch.no_grad():
        tuned.weight.view(torch.int32)[0, 0] ^= 1
    assert _fingerprinted(make_args, models=[tuned])[0][contract.INFO]["system_fingerprint"] != again


def test_every_tp_ranks_weights_are_in_the_fingerprint(make_args):
    from corun_sglang.serving.adapters import contract

    torch.manual_seed(0)
    shards = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
    first = _fingerprinted(make_args, models=shards)
    assert len(first[0][contract.INFO]["weights"]) == 2
    with torch.no_grad():
        shards[1].bias.view(torch.int32)[0] ^= 1  # rank 1's shard only
    assert (_fingerprinted(make_args, models=shards)[0][contract.INFO]["system_fingerprint"]
            != first[0][contract.INFO]["system_fingerprint"])


def test_without_corun_the_init_info_is_sglangs(make_args):
    from corun_sglang.serving.adapters import contract

    info = _started_scheduler(make_args(corun=False), torch.nn.Linear(2, 2)).get_init_info()
    assert contract.INFO not in info and info["status"] == "ready"
    _tokenizer_process(make_args(corun=True))  # a --corun engine handed a scheduler that reported none
    with pytest.raises(CorunContractError, match="reported no corun_contract"):
        contract.hand_over(None, _Manager(), _InitResult(scheduler_infos=[info]))


def test_meta_info_carries_the_fingerprint_and_each_samples_seed(tokenizer_manager, make_args):
    from sglang.srt.managers.io_struct import GenerateReqInput

    from corun_sglang.serving.adapters import contract
    from corun_sglang.core.seeds import child_seed

    tm = _answering(tokenizer_manager())
    value = _fingerprinted(make_args, tm)[0][contract.INFO]["system_fingerprint"]
    (out,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"sampling_seed": 11}))
    assert out["meta_info"]["system_fingerprint"] == value and out["meta_info"]["sampling_seed"] == 11
    (outs,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"n": 3, "sampling_seed": 11}))
    assert [o["meta_info"]["sampling_seed"] for o in outs] == [child_seed(11, i) for i in range(3)]
    assert {o["meta_info"]["system_fingerprint"] for o in outs} == {value}


def test_a_returned_seed_replays_its_sample(tokenizer_manager):
    """Child i of an unseeded n > 1 request, and an unseeded request, sent again with the seed they returned
    and n = 1, are sampled from that seed."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    tm = _answering(tokenizer_manager())
    (children,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"n": 3, "temperature": 0.7}))
    (single,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"temperature": 0.7}))
    for out in [*children, single]:
        seed = out["meta_info"]["sampling_seed"]
        tm.sent.clear()
        (replay,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7],
                                                   sampling_params={"temperature": 0.7, "sampling_seed": seed}))
        assert tm.sent[-1].sampling_params.sampling_seed == seed == replay["meta_info"]["sampling_seed"]
        assert replay["output_ids"] == out["output_ids"]


def test_identical_unseeded_requests_are_distinct_and_replayed_by_a_fresh_server(tokenizer_manager):
    from sglang.srt.managers.io_struct import GenerateReqInput

    def run():
        tm = _answering(tokenizer_manager())
        return [_generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"temperature": 0.7}))[0]
                ["meta_info"]["sampling_seed"] for _ in range(8)]

    first = run()
    assert len(set(first)) == 8
    assert run() == first


def _completion_serving(tm):
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion

    return OpenAIServingCompletion(tm, types.SimpleNamespace(completion_template_name=None))


def _completion(tm, **body):
    import asyncio
    import json

    from sglang.srt.entrypoints.openai.protocol import CompletionRequest

    async def run():
        response = await _completion_serving(tm).handle_request(
            CompletionRequest(model="m", prompt=[5, 6, 7], max_tokens=2, **body), None)
        if not body.get("stream"):
            return json.loads(json.dumps(response.model_dump(mode="json")))
        events = [e async for e in response.body_iterator]
        return [json.loads(e[len("data: "):]) for e in events if e.startswith("data: {")]

    return asyncio.run(run())


def test_openai_completions_carry_the_fingerprint_and_each_choices_seed(tokenizer_manager, make_args):
    from corun_sglang.serving.adapters import contract
    from corun_sglang.core.seeds import child_seed

    tm = _answering(tokenizer_manager())
    value = _fingerprinted(make_args, tm)[0][contract.INFO]["system_fingerprint"]
    out = _completion(tm, seed=5, n=2, temperature=0.7)
    assert out["system_fingerprint"] == value
    assert [c["sampling_seed"] for c in out["choices"]] == [child_seed(5, 0), child_seed(5, 1)]
    assert [c["text"] for c in out["choices"]] == [f"s{child_seed(5, i) % 97}" for i in range(2)]
    chunks = _completion(tm, seed=5, n=2, temperature=0.7, stream=True)
    assert chunks and {c["system_fingerprint"] for c in chunks} == {value}
    streamed = {c["choices"][0]["index"]: c["choices"][0]["sampling_seed"] for c in chunks}
    assert streamed == {0: child_seed(5, 0), 1: child_seed(5, 1)}
    (replay,) = _completion(tm, seed=out["choices"][1]["sampling_seed"], temperature=0.7)["choices"]
    assert replay["text"] == out["choices"][1]["text"]


def test_without_corun_openai_completions_are_sglangs(tokenizer_manager):
    tm = _answering(tokenizer_manager(corun=False))
    out = _completion(tm, seed=5, temperature=0.7)
    assert "system_fingerprint" not in out and "sampling_seed" not in out["choices"][0]
    assert all("system_fingerprint" not in c for c in _completion(tm, seed=5, stream=True))


def test_a_chat_completion_carries_the_fingerprint_and_each_choices_seed(tokenizer_manager, make_args):
    """SGLang's own chat response, as ``_build_chat_response`` makes it, through the adapter; its JSON is
    SGLang's with the two fields added."""
    from sglang.srt.entrypoints.openai.protocol import (ChatCompletionResponse, ChatCompletionResponseChoice,
                                                        ChatMessage, UsageInfo)

    from corun_sglang.serving.adapters import contract

    tm = tokenizer_manager()
    value = _fingerprinted(make_args, tm)[0][contract.INFO]["system_fingerprint"]
    ret = [{"meta_info": {"sampling_seed": 21}}, {"meta_info": {"sampling_seed": 22}}]

    def build(self, request, ret, created):
        return ChatCompletionResponse(id="r", model="m", created=created, usage=UsageInfo(), choices=[
            ChatCompletionResponseChoice(index=i, message=ChatMessage(role="assistant", content=f"c{i}"),
                                         finish_reason="length") for i in range(len(ret))])

    serving = types.SimpleNamespace(tokenizer_manager=tm)
    plain = build(serving, None, ret, 7).model_dump(mode="json")
    stamped = contract.chat_response(build, serving, None, ret, 7)
    assert isinstance(stamped, ChatCompletionResponse)
    assert stamped.model_dump(mode="json") == {
        **plain, "system_fingerprint": value,
        "choices": [{**c, "sampling_seed": s} for c, s in zip(plain["choices"], [21, 22])]}
    serving = types.SimpleNamespace(tokenizer_manager=tokenizer_manager(corun=False))
    assert contract.chat_response(build, serving, None, ret, 7).model_dump(mode="json") == plain
