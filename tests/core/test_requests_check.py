"""``requests_check`` against SGLang 0.5.17's own request classes: every parameter classified, every
refused or malformed value refused with its name, every verified and free value served."""

import dataclasses
import inspect
import json
from pathlib import Path

import pytest
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.sampling.sampling_params import SamplingParams

from corun_sglang.core import requests_check
from corun_sglang.tools import request_corpus
from corun_sglang.core.requests_check import FREE, REFUSED, TABLE, VERIFIED, RequestRefused

DOC = Path(__file__).resolve().parents[2] / "docs" / "requests.md"


def _sampling_names():
    return list(inspect.signature(SamplingParams).parameters)


def test_every_sampling_parameter_of_sglang_is_classified():
    unclassified = [n for n in _sampling_names() if ("sampling_params", n) not in TABLE]
    assert not unclassified, f"SamplingParams parameters without a row in requests_check: {unclassified}"
    stale = [p.name for p in requests_check.PARAMETERS
             if p.where == "sampling_params" and p.name not in _sampling_names()]
    assert not stale


def test_every_generate_request_field_of_sglang_is_classified():
    names = [f.name for f in dataclasses.fields(GenerateReqInput)]
    unclassified = [n for n in names if ("request", n) not in TABLE]
    assert not unclassified, f"GenerateReqInput fields without a row in requests_check: {unclassified}"
    assert not [p.name for p in requests_check.PARAMETERS if p.where == "request" and p.name not in names]


def test_verified_parameters_are_those_the_suite_ran():
    verified = {p.name for p in requests_check.PARAMETERS if p.status == VERIFIED}
    assert verified == {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "sampling_seed", "ignore_eos",
                        "n", "return_logprob", "logprob_start_len", "frequency_penalty", "presence_penalty",
                        "repetition_penalty", "min_new_tokens", "logit_bias", "json_schema", "regex", "ebnf",
                        "structural_tag"}
    assert all("docs/results/determinism" in TABLE["sampling_params", n].note
               for n in verified - {"return_logprob", "logprob_start_len"})


def test_refused_defaults_are_sglangs():
    signature = inspect.signature(SamplingParams).parameters
    for name, default in requests_check.SAMPLING_DEFAULTS.items():
        assert signature[name].default == default, name
    assert set(requests_check.SAMPLING_DEFAULTS) == {
        p.name for p in requests_check.PARAMETERS if p.where == "sampling_params" and p.status == REFUSED
    } | set(requests_check.NEEDS_TOKENIZER)


def test_every_refusal_names_its_parameter_why_and_fix():
    for p in requests_check.PARAMETERS:
        if p.status == REFUSED:
            message = p.refusal()
            assert message.startswith(p.name) and "not verified under --corun (" in message and "Fix: " in message
            assert p.fix


@pytest.mark.parametrize("seed", [-1, 1 << 63, 1 << 70, "abc", "7", 1.5, 7.0, True, False, [1], {"a": 1}])
def test_seeds_outside_the_range_or_not_ints_are_refused(seed):
    sp = SamplingParams(max_new_tokens=4, sampling_seed=seed)  # SGLang accepts each of these
    sp.normalize(None)
    sp.verify(1024)
    with pytest.raises(ValueError) as err:
        requests_check.check({}, {"sampling_seed": seed})
    assert "sampling_seed (OpenAI seed)" in str(err.value) and "2**63" in str(err.value)
    assert requests_check.seed_problem(seed)


@pytest.mark.parametrize("seed", [None, 0, 1, 12345, (1 << 63) - 1])
def test_seeds_in_range_pass(seed):
    requests_check.check({}, {"sampling_seed": seed})
    assert requests_check.seed_problem(seed) is None


@pytest.mark.parametrize("name", sorted(request_corpus.REFUSED_SAMPLING_VALUES))
def test_each_refused_sampling_parameter_is_refused_after_sglangs_own_normalization(name):
    value = request_corpus.REFUSED_SAMPLING_VALUES[name]
    SamplingParams(**{name: value})  # SGLang builds it
    with pytest.raises(RequestRefused) as err:
        requests_check.check({}, {name: value})
    assert str(err.value).startswith(name)


@pytest.mark.parametrize("name", sorted(request_corpus.REFUSED_REQUEST_VALUES))
def test_each_refused_request_field_is_refused(name):
    fields = {"return_logprob": True, name: request_corpus.REFUSED_REQUEST_VALUES[name]}
    with pytest.raises(RequestRefused) as err:
        requests_check.check(fields, {}, prompt_len=8)
    assert str(err.value).startswith(name)


def test_refused_parameters_at_their_default_pass():
    requests_check.check({"top_logprobs_num": 0, "return_hidden_states": False, "lora_path": None,
                          "session_params": {}, "logprob_start_len": -1, "return_logprob": True},
                         {"frequency_penalty": 0, "repetition_penalty": 1.0, "json_schema": "", "logit_bias": {},
                          "min_new_tokens": 0, "custom_params": None})


def test_prompt_logprobs_pass_and_a_start_of_another_type_is_refused():
    requests_check.check({"return_logprob": True, "logprob_start_len": 8}, {}, prompt_len=8)
    requests_check.check({"return_logprob": True, "logprob_start_len": 0}, {}, prompt_len=8)  # verify-prefill-pack's
    with pytest.raises(RequestRefused, match="^logprob_start_len"):
        requests_check.check({"return_logprob": True, "logprob_start_len": "3"}, {}, prompt_len=8)


@pytest.mark.parametrize("params,name", [
    ({"temperature": "0.7"}, "temperature"), ({"temperature": True}, "temperature"), ({"top_p": [1]}, "top_p"),
    ({"top_k": 2.0}, "top_k"), ({"min_p": "0"}, "min_p"), ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"max_new_tokens": 4.0}, "max_new_tokens"), ({"ignore_eos": 1}, "ignore_eos"), ({"n": True}, "n"),
    ({"n": 0}, "n"), ({"stop": 5}, "stop"), ({"stop_token_ids": ["a"]}, "stop_token_ids"),
    ({"stream_interval": 0}, "stream_interval"), ({"bogus": 1}, "bogus"),
])
def test_wrong_types_and_unknown_parameters_are_refused_by_name(params, name):
    with pytest.raises(RequestRefused) as err:
        requests_check.check({}, params)
    assert str(err.value).startswith(name)


def test_non_object_sampling_params_are_refused():
    with pytest.raises(RequestRefused, match="^sampling_params"):
        requests_check.check({}, "abc")


def test_server_preferred_parameters_are_checked_and_named():
    with pytest.raises(RequestRefused, match="--preferred-sampling-params"):
        requests_check.check({}, {}, preferred={"custom_params": {"k": 1}})
    requests_check.check({}, {"custom_params": None}, preferred={"custom_params": {"k": 1}})
    with pytest.raises(RequestRefused, match="^frequency_penalty"):  # a verified one is type-checked as sent
        requests_check.check({}, {}, preferred={"frequency_penalty": "0.5"})


@pytest.mark.parametrize("n", ["2", None, 2.5, 0, -1, True])
def test_n_that_sglang_cannot_expand_is_refused(n):
    assert requests_check.n_problem({"n": n}).startswith("n:")
    assert requests_check.n_problem([{"n": 1}, {"n": n}]).startswith("n:")


def test_served_n_passes():
    assert requests_check.n_problem({"n": 4}) is None and requests_check.n_problem([{}, {"n": 1}]) is None


def test_verified_and_free_values_pass_through_sglangs_own_classes():
    params = {"max_new_tokens": 8, "temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "n": 2,
              "sampling_seed": 7, "ignore_eos": True, "stop": ["x"], "stop_token_ids": [2], "stop_regex": "y+",
              "skip_special_tokens": False, "spaces_between_special_tokens": False, "no_stop_trim": True,
              "stream_interval": 3}
    sp = SamplingParams(**params)
    sp.verify(1024)  # normalize() would need a tokenizer for the stop strings
    obj = GenerateReqInput(input_ids=[1, 2, 3], sampling_params=params, return_logprob=True, stream=True, rid="r")
    obj.normalize_batch_and_arguments()
    for i in range(obj.batch_size):
        sub = obj[i]
        requests_check.check({f.name: getattr(sub, f.name) for f in dataclasses.fields(sub)}, sub.sampling_params, 3)


# ----------------------------------------------------------------- refused parameters a GPU queue chunk measures

MEASURED_VALUES = {
    "sampling_params": {},
    "request": {"top_logprobs_num": 5, "token_ids_logprob": [3, 7]},
}


def test_the_measurable_parameters_are_the_openai_surfaces():
    measurable = {p.name for p in requests_check.PARAMETERS if p.measure}
    assert measurable == set(MEASURED_VALUES["sampling_params"]) | set(MEASURED_VALUES["request"])
    assert all(p.status == REFUSED and p.accepts is not None and "not yet run among co-runners" in p.note
               for p in requests_check.PARAMETERS if p.measure)


def test_a_measured_parameter_is_served_only_where_measured():
    sampling, request = MEASURED_VALUES["sampling_params"], MEASURED_VALUES["request"]
    names = frozenset(sampling) | frozenset(request)
    with pytest.raises(RequestRefused):
        requests_check.check({"return_logprob": True, **request}, sampling)
    requests_check.check({"return_logprob": True, **request}, sampling, measured=names)
    for name in names:  # measuring the others leaves this one refused
        one = ({}, {name: sampling[name]}) if name in sampling else ({"return_logprob": True, name: request[name]}, {})
        requests_check.check(*one, measured=frozenset({name}))
        with pytest.raises(RequestRefused, match=f"^{name}"):
            requests_check.check(*one, measured=names - {name})


@pytest.mark.parametrize("params,fields,name", [
    ({"frequency_penalty": "0.5"}, {}, "frequency_penalty"), ({"repetition_penalty": float("nan")}, {}, "repetition_penalty"),
    ({"min_new_tokens": -1}, {}, "min_new_tokens"), ({"min_new_tokens": 2.0}, {}, "min_new_tokens"),
    ({"logit_bias": {"seven": 1.0}}, {}, "logit_bias"), ({"logit_bias": {"7": float("inf")}}, {}, "logit_bias"),
    ({"logit_bias": [7]}, {}, "logit_bias"), ({"json_schema": {"type": "object"}}, {}, "json_schema"),
    ({"regex": 5}, {}, "regex"), ({"ebnf": ['root ::= "a"']}, {}, "ebnf"),
    ({"structural_tag": {"type": "structural_tag"}}, {}, "structural_tag"),
    ({}, {"top_logprobs_num": requests_check.TOP_LOGPROBS_MAX + 1}, "top_logprobs_num"),
    ({}, {"top_logprobs_num": 2.0}, "top_logprobs_num"), ({}, {"token_ids_logprob": ["a"]}, "token_ids_logprob"),
])
def test_a_served_parameter_of_the_wrong_type_is_refused_by_name(params, fields, name):
    measured = frozenset(MEASURED_VALUES["sampling_params"]) | frozenset(MEASURED_VALUES["request"])
    with pytest.raises(RequestRefused) as err:
        requests_check.check(fields, params, measured=measured)
    assert str(err.value).startswith(name)


def test_each_measured_parameter_is_measured_by_the_queue_chunks_it_names():
    import shlex
    import tomllib

    queue = tomllib.loads((DOC.parent.parent / "scripts" / "gpu_queue.toml").read_text())
    commands = {c["id"]: c["command"] for c in queue["chunk"]}
    for p in requests_check.PARAMETERS:
        for chunk in filter(None, (c.strip() for c in p.measure.split(","))):
            assert chunk in commands, f"{p.name}: no queue chunk {chunk}"
            env = [w for w in shlex.split(commands[chunk]) if w.startswith("CORUN_SUITE_CORUN_ARGS=")]
            given = shlex.split(env[0].split("=", 1)[1]) if env else []
            assert given[:1] == [requests_check.MEASURE_OPTION], (p.name, chunk)
            assert p.name in requests_check.measured_names(given[1]), (p.name, chunk)


def test_each_condition_is_measured_by_the_queue_chunk_it_names():
    import shlex
    import tomllib

    queue = tomllib.loads((DOC.parent.parent / "scripts" / "gpu_queue.toml").read_text())
    commands = {c["id"]: c["command"] for c in queue["chunk"]}
    for c in requests_check.CONDITIONS:
        assert c.measure in commands, f"{c.name}: no queue chunk {c.measure}"
        words = shlex.split(commands[c.measure])
        env = dict(w.split("=", 1) for w in words if w.startswith("CORUN_") and "=" in w)
        given = shlex.split(env.get("CORUN_SUITE_CORUN_ARGS", ""))
        assert given[:1] == [requests_check.MEASURE_OPTION] and c.name in requests_check.measured_names(given[1])
        assert c.flag() in shlex.split(env.get("CORUN_SUITE_SERVER_ARGS", "")), (
            f"{c.measure}: its servers run without {c.flag()}, so {c.name} would go unmeasured")
        assert set(c.params) <= {p.name for p in requests_check.PARAMETERS if p.status == VERIFIED}


@pytest.mark.parametrize("name,value", [
    ("json_schema", '{"type": "object"}'), ("regex", "[a-z]+"), ("ebnf", 'root ::= "yes"'),
    ("structural_tag", '{"format": {"type": "const_string", "value": "x"}}')])
def test_a_grammar_waits_on_its_measure_on_a_server_with_a_reasoning_parser(name, value):
    reasoning = {"reasoning_parser": "qwen3"}
    requests_check.check({}, {name: value})  # verified without a reasoning parser
    requests_check.check({}, {name: value}, options={"reasoning_parser": None})
    requests_check.check({}, {name: None}, options=reasoning)  # unset: nothing to refuse
    with pytest.raises(RequestRefused, match=f"^{name}.*on a server with --reasoning-parser") as err:
        requests_check.check({}, {name: value}, options=reasoning)
    assert "Fix: send it to a server without --reasoning-parser" in str(err.value)
    requests_check.check({}, {name: value}, options=reasoning, measured=frozenset({"grammar_under_reasoning"}))
    with pytest.raises(RequestRefused, match=f"^{name}.*not accepted"):  # still type-checked where measured
        requests_check.check({}, {name: 7}, options=reasoning, measured=frozenset({"grammar_under_reasoning"}))


def test_a_condition_is_measurable_by_name_and_nothing_else_is_added():
    assert requests_check.measured_names("grammar_under_reasoning") == {"grammar_under_reasoning"}
    assert {c.name for c in requests_check.CONDITIONS} <= requests_check.measurable_names()
    with pytest.raises(ValueError, match=requests_check.MEASURE_OPTION):
        requests_check.measured_names("grammar_under_reasoning,reasoning_parser")


def test_min_new_tokens_needs_the_servers_tokenizer():
    requests_check.check({}, {"min_new_tokens": 4})
    requests_check.check({}, {"min_new_tokens": 0}, has_tokenizer=False)
    with pytest.raises(RequestRefused, match="^min_new_tokens .*--skip-tokenizer-init"):
        requests_check.check({}, {"min_new_tokens": 4}, has_tokenizer=False)


def test_only_measurable_parameters_can_be_measured():
    assert requests_check.measured_names(None) == frozenset() == requests_check.measured_names(" , ")
    assert requests_check.measured_names("token_ids_logprob, top_logprobs_num") == {"token_ids_logprob",
                                                                                  "top_logprobs_num"}
    for value in ("lora_path", "top_logprobs_num,bogus", "custom_params"):
        with pytest.raises(ValueError, match=requests_check.MEASURE_OPTION):
            requests_check.measured_names(value)
    with pytest.raises(ValueError, match=r"names regex, which .*\(regex: verified or free, served without it\)"):
        requests_check.measured_names("top_logprobs_num,regex")  # verified: nothing left to measure


# ----------------------------------------------------------------- the OpenAI protocol's conversions


def _completion_params(**fields):
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion

    serving = OpenAIServingCompletion.__new__(OpenAIServingCompletion)
    return serving._build_sampling_params(CompletionRequest(prompt=[1, 2, 3], **fields))


def _chat_params(**fields):
    return ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], **fields).to_sampling_params(
        stop=[], model_generation_config={})


@pytest.mark.parametrize("convert", [_completion_params, _chat_params], ids=["completions", "chat"])
@pytest.mark.parametrize("seed", [-1, 1 << 63, 1 << 70])
def test_openai_seeds_outside_the_range_are_refused_not_folded(convert, seed):
    with pytest.raises(RequestRefused) as err:
        requests_check.check({}, convert(seed=seed, max_tokens=4))
    assert "sampling_seed (OpenAI seed)" in str(err.value)


@pytest.mark.parametrize("convert", [_completion_params, _chat_params], ids=["completions", "chat"])
def test_openai_defaults_pass(convert):
    requests_check.check({}, convert(seed=5, max_tokens=4, temperature=0.7, n=2))


STRUCTURAL_TAG = json.loads(request_corpus.GRAMMAR_VALUES["structural_tag"])


@pytest.mark.parametrize("convert", [_completion_params, _chat_params], ids=["completions", "chat"])
@pytest.mark.parametrize("fields,name", [
    ({"response_format": {"type": "json_object"}}, "json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}},
     "json_schema"),
    ({"response_format": STRUCTURAL_TAG}, "structural_tag"),
    ({"regex": "[a-z]"}, "regex"),
    ({"ebnf": 'root ::= "a"'}, "ebnf"),
])
def test_openai_structured_outputs_are_served(convert, fields, name):
    params = convert(max_tokens=4, seed=3, **fields)
    assert params[name]
    requests_check.check({}, params)


def test_an_openai_refused_parameter_is_named():
    with pytest.raises(RequestRefused, match="^custom_params"):
        requests_check.check({}, _chat_params(max_tokens=4, custom_params={"k": 1}))


@pytest.mark.parametrize("convert", [_completion_params, _chat_params], ids=["completions", "chat"])
def test_openai_penalties_min_tokens_and_logit_bias_are_served(convert):
    params = convert(max_tokens=8, seed=3, frequency_penalty=0.5, presence_penalty=-0.25, repetition_penalty=1.2,
                     min_tokens=2, logit_bias={"5": 1.0, "9": -100})
    assert (params["frequency_penalty"], params["presence_penalty"], params["repetition_penalty"],
            params["min_new_tokens"]) == (0.5, -0.25, 1.2, 2) and params["logit_bias"]
    requests_check.check({}, params)


def test_openai_logprobs_map_to_top_logprobs_num():
    with pytest.raises(RequestRefused) as err:
        requests_check.check({"return_logprob": True, "top_logprobs_num": 3}, {})
    assert "top_logprobs_num (OpenAI logprobs / top_logprobs)" in str(err.value)


# ----------------------------------------------------------------- the corpus and the document


def test_the_corpus_is_well_formed_json_cases():
    import json

    names = [c.name for c in request_corpus.CASES]
    assert len(names) == len(set(names))
    for case in request_corpus.CASES:
        json.dumps(case.body)
        assert case.status in (200, 400) and (case.status == 200) == (not case.names)


def test_the_document_holds_the_generated_table():
    assert requests_check.markdown_table() in DOC.read_text(), (
        "docs/requests.md is out of date: paste requests_check.markdown_table() into it")


def test_the_document_holds_the_generated_conditions():
    assert requests_check.conditions_table() in DOC.read_text(), (
        "docs/requests.md is out of date: paste requests_check.conditions_table() into it")


def test_the_table_lists_every_row_once():
    table = requests_check.markdown_table()
    for p in requests_check.PARAMETERS:
        assert table.count(f"| `{p.name}` |") == 1
    assert {p.status for p in requests_check.PARAMETERS} == {VERIFIED, FREE, REFUSED}
