"""``adapters.requests``: the tokenizer-side request check, on SGLang's own ``TokenizerManager`` and the
request corpus; pass-through without --corun."""

import types

import pytest

from adapters.helpers import _generate


def _request_of(case, tm):
    """A corpus case as the ``GenerateReqInput`` its endpoint hands the tokenizer manager (OpenAI bodies
    through SGLang's own protocol models and conversions)."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
    from sglang.srt.managers.io_struct import GenerateReqInput

    from corun_sglang.tools import request_corpus

    if case.path == request_corpus.GENERATE:
        return GenerateReqInput(**case.body)
    if case.path == request_corpus.COMPLETIONS:
        serving = OpenAIServingCompletion.__new__(OpenAIServingCompletion)
        serving.tokenizer_manager = tm
        serving.template_manager = types.SimpleNamespace(completion_template_name=None)
        serving.allowed_custom_labels = None
        return serving._convert_to_internal_request(CompletionRequest(**case.body))[0]
    request = ChatCompletionRequest(**case.body)  # as serving_chat builds it, the prompt already tokenized
    return GenerateReqInput(
        input_ids=list(request_corpus.PROMPT), stream=request.stream, rid=request.rid, return_text_in_logprobs=True,
        sampling_params=request.to_sampling_params(stop=[], model_generation_config={}),
        return_logprob=request.logprobs, logprob_start_len=-1, top_logprobs_num=request.top_logprobs or 0,
    )


def _corpus():
    from corun_sglang.tools import request_corpus

    return [pytest.param(c, id=c.name) for c in request_corpus.CASES]


@pytest.mark.parametrize("case", _corpus())
def test_each_corpus_request_is_served_or_refused_by_name_before_the_scheduler(tokenizer_manager, case):
    tm = tokenizer_manager()
    if case.status == 200:
        _generate(tm, _request_of(case, tm))
        assert tm.sent
        return
    with pytest.raises(ValueError) as err:
        _generate(tm, _request_of(case, tm))
    assert all(name in str(err.value) for name in case.names), str(err.value)
    assert not tm.sent and not tm.rid_to_state  # nothing reached the scheduler, nothing left behind


def _reasoning_request(**params):
    from sglang.srt.managers.io_struct import GenerateReqInput

    return GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"max_new_tokens": 4, **params},
                            require_reasoning=True)


def test_a_grammar_on_a_server_with_a_reasoning_parser_is_served(tokenizer_manager):
    """SGLang wraps grammars in its reasoning wrapper under ``--reasoning-parser``, the path scenario t verified:
    a ``--corun`` server with a reasoning parser passes a grammar request to the scheduler, type-checked, a
    structural tag (a thinking model's forced tool call) among them."""
    tm = tokenizer_manager(reasoning_parser="qwen3")
    schema = '{"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}'
    _generate(tm, _reasoning_request(json_schema=schema))
    _generate(tm, _reasoning_request(regex="[a-z]+"))
    assert [r.sampling_params.json_schema for r in tm.sent] == [schema, None]
    assert tm.sent[1].sampling_params.regex == "[a-z]+" and tm.sent[0].require_reasoning
    with pytest.raises(ValueError, match=r"^json_schema \(OpenAI [^)]*\): 7 is not accepted"):
        _generate(tm, _reasoning_request(json_schema=7))
    tag = '{"format": {"type": "const_string", "value": "x"}}'
    _generate(tm, _reasoning_request(structural_tag=tag))
    assert len(tm.sent) == 3 and tm.sent[2].sampling_params.structural_tag == tag


def test_a_condition_refuses_its_parameters_on_a_server_with_its_option_until_measured(tokenizer_manager,
                                                                                       condition):
    """A server option a condition names (the fixture's: ``--reasoning-parser``, over the grammars) keeps its
    parameters from the scheduler, a 400 naming each, unless the server's ``--corun-measure`` names the
    condition; requests without them, and servers without the option, are served as before."""
    tm = tokenizer_manager(**{condition.option: "qwen3"})
    with pytest.raises(ValueError, match=f"^regex: not verified under --corun on a server with {condition.flag()}"):
        _generate(tm, _reasoning_request(regex="[a-z]+"))
    assert not tm.sent and not tm.rid_to_state
    _generate(tm, _reasoning_request())  # no grammar: served
    assert len(tm.sent) == 1
    for options in ({condition.option: "qwen3", "corun_measure": condition.name}, {}):
        tm = tokenizer_manager(**options)
        _generate(tm, _reasoning_request(regex="[a-z]+"))
        assert tm.sent[0].sampling_params.regex == "[a-z]+"


def test_a_measured_parameter_is_served_only_by_a_server_that_measures_it(tokenizer_manager, measurable):
    """A refused parameter a GPU queue chunk measures reaches the scheduler only from a server whose
    ``--corun-measure`` names it, and there only with a value of its type."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    def request(value):
        return GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"max_new_tokens": 4}, return_logprob=True,
                                **{measurable: value})

    tm = tokenizer_manager()
    with pytest.raises(ValueError, match=f"^{measurable}: not verified under --corun"):
        _generate(tm, request(True))
    assert not tm.sent and not tm.rid_to_state
    tm = tokenizer_manager(corun_measure=measurable)
    _generate(tm, request(True))
    assert len(tm.sent) == 1
    with pytest.raises(ValueError, match=f"^{measurable}: 1 is not accepted"):
        _generate(tm, request(1))
    assert len(tm.sent) == 1


def test_without_corun_the_check_passes_everything_through(tokenizer_manager):
    from sglang.srt.managers.io_struct import GenerateReqInput

    tm = tokenizer_manager(corun=False)
    _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"frequency_penalty": 0.5, "sampling_seed": 2**70},
                                   top_logprobs_num=3, return_logprob=True))
    assert tm.sent[0].sampling_params.frequency_penalty == 0.5 and tm.sent[0].sampling_params.sampling_seed == 2**70


# ------------------------------------------------------------------ the official OpenAI client, through SGLang's HTTP app

TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
OUTPUT_IDS = [5, 6]


def _text_of(sampling_params) -> str:
    """What the stand-in scheduler answers: text that fits the request's grammar, if it has one."""
    if sampling_params.json_schema and "get_weather" in sampling_params.json_schema:
        return '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
    if sampling_params.structural_tag and "get_weather" in sampling_params.structural_tag:  # Qwen2.5's format
        return '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    return '{"answer": "yes"}' if sampling_params.json_schema else "w5 w6"


def _answering(tm):
    """``tm`` answers each request it sends as a scheduler would: two output tokens with their logprobs and,
    when asked, their top-k logprobs (SGLang's own ``_wait_one_response`` hands them on)."""
    from sglang.srt.managers.io_struct import BatchTokenizedGenerateReqInput, TokenizedGenerateReqInput

    def answer(obj):
        if not isinstance(obj, (TokenizedGenerateReqInput, BatchTokenizedGenerateReqInput)):
            return  # an abort of a request already answered
        tm.sent.append(obj)
        for one in obj.batch if isinstance(obj, BatchTokenizedGenerateReqInput) else [obj]:
            meta = {"id": one.rid, "finish_reason": {"type": "stop", "matched": 1023},
                    "prompt_tokens": len(one.input_ids), "completion_tokens": len(OUTPUT_IDS), "reasoning_tokens": 0,
                    "cached_tokens": 0, "weight_version": "default"}
            if one.return_logprob:
                k = one.top_logprobs_num

                def top(t):
                    return [(-0.5 - j / 4, t + j, f"w{t + j}") for j in range(k)] if k else None

                meta["output_token_logprobs"] = [(-0.5, t, f"w{t}") for t in OUTPUT_IDS]
                meta["output_top_logprobs"] = [top(t) for t in OUTPUT_IDS]
                if one.logprob_start_len >= 0:  # prompt logprobs (echo): the first position has none
                    prompt = list(one.input_ids)[one.logprob_start_len:]
                    meta["input_token_logprobs"] = [(None if i == 0 else -1.0, t, f"w{t}") for i, t in enumerate(prompt)]
                    meta["input_top_logprobs"] = [None if i == 0 else top(t) for i, t in enumerate(prompt)]
            state = tm.rid_to_state[one.rid]
            state.out_list.append({"text": _text_of(one.sampling_params), "output_ids": list(OUTPUT_IDS),
                                   "meta_info": meta})
            state.finished = True
            state.event.set()

    tm._dispatch_to_scheduler = answer
    del tm._wait_one_response  # SGLang's own, hooked
    tm.incremental_streaming_output = False
    return tm


@pytest.fixture
def openai_client(tokenizer_manager, tmp_path, monkeypatch):
    """``client(tool_call_parser=None)``: the official ``openai`` client, served by SGLang's own FastAPI app and
    OpenAI serving classes over the ``TokenizerManager`` of a plain ``--corun`` server (a word-level tokenizer
    with a chat template; the scheduler answered by ``_answering``); ``tool_call_parser`` is the server's
    ``--tool-call-parser``."""
    import httpx
    import openai
    from sglang.srt.entrypoints import http_server
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
    from sglang.srt.parser.template_manager import TemplateManager
    from transformers import AutoTokenizer

    from corun_sglang.tools import synthetic

    tokenizer = AutoTokenizer.from_pretrained(str(synthetic.write_tokenizer(tmp_path / "tokenizer", "qwen3-tiny")))

    def client(tool_call_parser=None):
        tm = _answering(tokenizer_manager(tool_call_parser=tool_call_parser))
        tm.tokenizer, tm.served_model_name, tm.async_dynamic_batch_tokenizer = tokenizer, "tiny", None
        templates = TemplateManager()
        monkeypatch.setattr(http_server.app.state, "openai_serving_completion",
                            OpenAIServingCompletion(tm, templates), raising=False)
        monkeypatch.setattr(http_server.app.state, "openai_serving_chat", OpenAIServingChat(tm, templates),
                            raising=False)
        transport = httpx.ASGITransport(app=http_server.app)
        return tm, openai.AsyncOpenAI(base_url="http://corun.test/v1", api_key="none", max_retries=0,
                                      http_client=httpx.AsyncClient(transport=transport, base_url="http://corun.test"))

    return client


def _call(openai_client, names, create, **server):
    """``create(client)`` as a user's client sends it to a plain ``--corun`` server, which serves ``names`` (each
    verified or free in ``requests_check``): the response and what reached the scheduler."""
    import asyncio

    from corun_sglang.core.requests_check import PARAMETERS, REFUSED

    assert not [p.name for p in PARAMETERS if p.name in names and p.status == REFUSED]
    tm, client = openai_client(**server)

    async def run():
        async with client:
            return await create(client)

    out = asyncio.run(run())
    (sent,) = tm.sent
    return out, sent


def test_openai_completions_with_logprobs_5(openai_client):
    out, sent = _call(openai_client, ["top_logprobs_num"], lambda c: c.completions.create(
        model="tiny", prompt="hello there", max_tokens=2, logprobs=5, echo=True, seed=3, temperature=0.7))
    assert sent.top_logprobs_num == 5 and sent.return_logprob and sent.logprob_start_len == 0
    top = out.choices[0].logprobs.top_logprobs  # echo: the prompt's positions (the first has none), then the output's
    assert len(top) == out.usage.prompt_tokens + len(OUTPUT_IDS) and top[0] is None
    assert all(len(step) == 5 for step in top[1:])


def test_openai_chat_with_top_logprobs(openai_client):
    out, sent = _call(openai_client, ["top_logprobs_num"], lambda c: c.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=2, logprobs=True,
        top_logprobs=5, seed=3))
    assert sent.top_logprobs_num == 5
    content = out.choices[0].logprobs.content
    assert len(content) == len(OUTPUT_IDS) and all(len(step.top_logprobs) == 5 for step in content)


def test_openai_chat_with_a_json_schema_response_format_is_served(openai_client):
    import json

    out, sent = _call(openai_client, ["json_schema"], lambda c: c.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=16, seed=3,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}))
    assert json.loads(sent.sampling_params.json_schema) == SCHEMA
    assert json.loads(out.choices[0].message.content) == {"answer": "yes"}


def test_openai_chat_with_a_structural_tag_response_format_is_served(openai_client):
    import json

    from corun_sglang.tools import request_corpus

    tag = json.loads(request_corpus.GRAMMAR_VALUES["structural_tag"])
    out, sent = _call(openai_client, ["structural_tag"], lambda c: c.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=16, seed=3,
        response_format=tag))
    assert json.loads(sent.sampling_params.structural_tag)["structures"] == tag["structures"]
    assert sent.sampling_params.json_schema is None


@pytest.mark.parametrize("parser", [None, "qwen25"])
def test_openai_chat_with_a_forced_tool_call_is_served(openai_client, parser):
    """SGLang constrains a forced tool call with a JSON schema of calls of that tool, or, where the server has a
    ``--tool-call-parser``, with the parser's structural tag; either is served by a plain ``--corun`` server."""
    import json

    grammar = "structural_tag" if parser else "json_schema"
    out, sent = _call(openai_client, [grammar], lambda c: c.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "weather in Paris?"}], max_tokens=32, seed=3,
        tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}}), tool_call_parser=parser)
    constraint = getattr(sent.sampling_params, grammar)
    assert "get_weather" in constraint
    message = out.choices[0].message
    if parser is None:  # no parser: the call is the message's JSON, an array of calls of that tool
        assert json.loads(constraint)["type"] == "array"
        assert json.loads(message.content) == [{"name": "get_weather", "parameters": {"city": "Paris"}}]
        return
    (call,) = message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}


PENALTIES = ["frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "logit_bias"]


def test_openai_chat_with_penalties_min_tokens_and_logit_bias_is_served(openai_client):
    out, sent = _call(openai_client, PENALTIES, lambda c: c.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=8, seed=3,
        frequency_penalty=0.5, presence_penalty=0.25, logit_bias={"7": 2.5},
        extra_body={"repetition_penalty": 1.2, "min_tokens": 2}))
    sp = sent.sampling_params
    assert (sp.frequency_penalty, sp.presence_penalty, sp.repetition_penalty, sp.min_new_tokens) == (0.5, 0.25, 1.2, 2)
    assert sp.logit_bias == {"7": 2.5}


@pytest.mark.parametrize("name,create", [
    ("logit_bias", lambda c: c.completions.create(model="tiny", prompt="hello", max_tokens=2,
                                                  logit_bias={"seven": 2.5})),
    ("top_logprobs_num", lambda c: c.completions.create(model="tiny", prompt="hello", max_tokens=2, logprobs=65)),
    ("top_logprobs_num", lambda c: c.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=2, logprobs=True, top_logprobs=65)),
], ids=["logit-bias", "completions-logprobs-65", "chat-top-logprobs-65"])
def test_a_verified_parameter_keeps_its_type_check(openai_client, name, create):
    import asyncio

    import openai

    tm, client = openai_client()

    async def run():
        async with client:
            return await create(client)

    with pytest.raises(openai.BadRequestError) as err:
        asyncio.run(run())
    assert name in str(err.value) and not tm.sent


def test_min_new_tokens_is_refused_where_the_scheduler_has_no_tokenizer(tokenizer_manager, monkeypatch):
    """SGLang's ``min_new_tokens`` penalizer reads the scheduler's tokenizer, which ``--skip-tokenizer-init``
    leaves unset: the scheduler would crash for every co-runner, so the request is refused first."""
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    from adapters.helpers import _cache, _req

    tm = tokenizer_manager(skip_tokenizer_init=True)
    _, cache = _cache(1000)
    req = _req(1, 10, 8, cache)
    req.sampling_params.min_new_tokens, req.tokenizer = 4, None  # what a --skip-tokenizer-init scheduler gives it
    with pytest.raises(AttributeError, match="additional_stop_token_ids"):
        SamplingBatchInfo.from_schedule_batch(ScheduleBatch(reqs=[req], device="cpu"), vocab_size=1024)
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 8, "min_new_tokens": 4}}
    with pytest.raises(ValueError, match="--skip-tokenizer-init"):
        _generate(tm, GenerateReqInput(**body))
    assert not tm.sent
    tm = tokenizer_manager()
    _generate(tm, GenerateReqInput(**body))
    assert tm.sent[0].sampling_params.min_new_tokens == 4
