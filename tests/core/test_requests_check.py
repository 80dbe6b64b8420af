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
                        "n", "return_logprob", "logprob_start_len", "top_logprobs_num", "token_ids_logprob",
                        "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "logit_bias",
                        "json_schema", "regex", "ebnf", "structural_tag"}
    notes = {p.name: p.note for p in requests_check.PARAMETERS}
    assert all("docs/results/determinism" in notes[n] for n in verified - {"logprob_start_len"})
    assert "docs/results/prefill_pack.md" in notes["logprob_start_len"]


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
    requests_check.check({"routed_experts_start_len": 0, "return_hidden_states": False, "lora_path": None,
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


# ----------------------------------------------------------------- top-k logprobs


@pytest.mark.parametrize("fields", [
    {"top_logprobs_num": 5}, {"top_logprobs_num": requests_check.TOP_LOGPROBS_MAX}, {"top_logprobs_num": 0},
    {"token_ids_logprob": [3, 7]}, {"top_logprobs_num": 1, "token_ids_logprob": [0]}, {"token_ids_logprob": None},
])
def test_top_k_logprobs_and_token_ids_logprob_are_served_without_measuring(fields):
    requests_check.check({"return_logprob": True, "logprob_start_len": 0, **fields}, {}, prompt_len=8)


# ----------------------------------------------------------------- refused parameters a GPU queue chunk measures


def test_a_measured_parameter_is_served_only_where_measured(measurable):
    request = {"return_logprob": True, measurable: True}
    with pytest.raises(RequestRefused, match=f"^{measurable}: not verified under --corun"):
        requests_check.check(request, {})
    requests_check.check(request, {}, measured=frozenset({measurable}))
    with pytest.raises(RequestRefused, match=f"^{measurable}"):  # measuring the others leaves it refused
        requests_check.check(request, {}, measured=requests_check.measurable_names() - {measurable})
    requests_check.check({measurable: False}, {})  # at SGLang's default: nothing to refuse
    with pytest.raises(RequestRefused, match=f"^{measurable}: 1 is not accepted"):  # type-checked where measured
        requests_check.check({measurable: 1}, {}, measured=frozenset({measurable}))


@pytest.mark.parametrize("params,fields,name", [
    ({"frequency_penalty": "0.5"}, {}, "frequency_penalty"), ({"repetition_penalty": float("nan")}, {}, "repetition_penalty"),
    ({"min_new_tokens": -1}, {}, "min_new_tokens"), ({"min_new_tokens": 2.0}, {}, "min_new_tokens"),
    ({"logit_bias": {"seven": 1.0}}, {}, "logit_bias"), ({"logit_bias": {"7": float("inf")}}, {}, "logit_bias"),
    ({"logit_bias": [7]}, {}, "logit_bias"), ({"json_schema": {"type": "object"}}, {}, "json_schema"),
    ({"regex": 5}, {}, "regex"), ({"ebnf": ['root ::= "a"']}, {}, "ebnf"),
    ({"structural_tag": {"type": "structural_tag"}}, {}, "structural_tag"),
    ({}, {"top_logprobs_num": requests_check.TOP_LOGPROBS_MAX + 1}, "top_logprobs_num"),
    ({}, {"top_logprobs_num": -1}, "top_logprobs_num"), ({}, {"top_logprobs_num": 2.0}, "top_logprobs_num"),
    ({}, {"top_logprobs_num": True}, "top_logprobs_num"), ({}, {"token_ids_logprob": ["a"]}, "token_ids_logprob"),
    ({}, {"token_ids_logprob": [1.0]}, "token_ids_logprob"), ({}, {"token_ids_logprob": 7}, "token_ids_logprob"),
])
def test_a_served_parameter_of_the_wrong_type_is_refused_by_name(params, fields, name):
    with pytest.raises(RequestRefused) as err:
        requests_check.check({"return_logprob": True, **fields}, params)
    assert str(err.value).startswith(name)


def _queue_commands() -> dict[str, str]:
    import tomllib

    queue = tomllib.loads((DOC.parent.parent / "scripts" / "gpu_queue.toml").read_text())
    return {c["id"]: c["command"] for c in queue["chunk"]}


def _unmeasured(parameters) -> list[str]:
    """Each row with a ``measure`` that is not a refused, typed row waiting on it, or whose queue chunks' ``--corun``
    servers do not name it in ``--corun-measure``."""
    import shlex

    commands, found = _queue_commands(), []
    for p in parameters:
        if p.measure and (p.status != REFUSED or p.accepts is None or "not yet run among co-runners" not in p.note):
            found.append(f"{p.name}: measured, but not a refused, typed row that waits on its measure")
        for chunk in filter(None, (c.strip() for c in p.measure.split(","))):
            if chunk not in commands:
                found.append(f"{p.name}: no queue chunk {chunk}")
                continue
            env = [w for w in shlex.split(commands[chunk]) if w.startswith("CORUN_SUITE_CORUN_ARGS=")]
            given = shlex.split(env[0].split("=", 1)[1]) if env else []
            named = {n.strip() for n in given[1].split(",")} if given[:1] == [requests_check.MEASURE_OPTION] else set()
            if p.name not in named:
                found.append(f"{p.name}: queue chunk {chunk} does not name it in {requests_check.MEASURE_OPTION}")
    return found


def test_each_measured_parameter_is_measured_by_the_queue_chunks_it_names():
    assert _unmeasured(requests_check.PARAMETERS) == []


def test_a_measure_no_queue_chunk_runs_is_caught(measurable):
    """The check above, on rows it must fail: the fixture's (its chunk's servers do not name it), one naming a chunk
    that does not exist, and a verified one that still names a measure."""
    unnamed = f"{measurable}: queue chunk suite-smollm2-surface does not name it in {requests_check.MEASURE_OPTION}"
    assert _unmeasured(requests_check.PARAMETERS) == [unnamed]
    row = requests_check.TABLE["request", measurable]
    rows = [dataclasses.replace(row, measure="no-such-chunk"), dataclasses.replace(row, status=VERIFIED)]
    assert _unmeasured(rows) == [f"{measurable}: no queue chunk no-such-chunk",
                                 f"{measurable}: measured, but not a refused, typed row that waits on its measure",
                                 unnamed]


def _unmeasured_conditions(conditions, commands=None) -> list[str]:
    """Each condition whose queue chunk does not exist, whose ``--corun`` servers do not name it in
    ``--corun-measure``, whose servers run without its option, or that names a parameter that is not verified."""
    import shlex

    commands, found = _queue_commands() if commands is None else commands, []
    verified = {p.name for p in requests_check.PARAMETERS if p.status == VERIFIED}
    for c in conditions:
        if not set(c.params) <= verified:
            found.append(f"{c.name}: names {sorted(set(c.params) - verified)}, not verified")
        if c.measure not in commands:
            found.append(f"{c.name}: no queue chunk {c.measure}")
            continue
        words = shlex.split(commands[c.measure])
        env = dict(w.split("=", 1) for w in words if w.startswith("CORUN_") and "=" in w)
        given = shlex.split(env.get("CORUN_SUITE_CORUN_ARGS", ""))
        named = {n.strip() for n in given[1].split(",")} if given[:1] == [requests_check.MEASURE_OPTION] else set()
        if c.name not in named:
            found.append(f"{c.name}: queue chunk {c.measure} does not name it in {requests_check.MEASURE_OPTION}")
        if c.flag() not in shlex.split(env.get("CORUN_SUITE_SERVER_ARGS", "")):
            found.append(f"{c.name}: queue chunk {c.measure}'s servers run without {c.flag()}")
    return found


def test_each_condition_is_measured_by_the_queue_chunk_it_names():
    assert _unmeasured_conditions(requests_check.CONDITIONS) == []


def test_a_condition_no_queue_chunk_measures_is_caught(condition):
    """The check above, on conditions it must fail and one it must pass: the fixture's (t's chunk runs with the
    reasoning parser but no longer names it), the same where the chunk names it, and ones with a chunk that does
    not exist, a server option its chunk does not set and a parameter that is not verified."""
    commands = _queue_commands()
    unnamed = (f"{condition.name}: queue chunk {condition.measure} does not name it in "
               f"{requests_check.MEASURE_OPTION}")
    assert _unmeasured_conditions(requests_check.CONDITIONS) == [unnamed]
    named = {**commands, condition.measure: commands[condition.measure].replace(
        "python3 -m pytest", f"CORUN_SUITE_CORUN_ARGS='{requests_check.MEASURE_OPTION} {condition.name}' "
        "python3 -m pytest")}
    assert _unmeasured_conditions([condition], named) == []
    others = [dataclasses.replace(condition, measure="no-such-chunk"),
              dataclasses.replace(condition, option="tool_call_parser"),
              dataclasses.replace(condition, params=("regex", "return_entropy"))]
    assert _unmeasured_conditions(others, named) == [
        f"{condition.name}: no queue chunk no-such-chunk",
        f"{condition.name}: queue chunk {condition.measure}'s servers run without --tool-call-parser",
        f"{condition.name}: names ['return_entropy'], not verified"]


GRAMMARS = [("json_schema", '{"type": "object"}'), ("regex", "[a-z]+"), ("ebnf", 'root ::= "yes"'),
            ("structural_tag", '{"format": {"type": "const_string", "value": "x"}}')]


@pytest.mark.parametrize("name,value", GRAMMARS)
def test_a_grammar_t_ran_is_served_on_a_server_with_a_reasoning_parser(name, value):
    """Scenario t verified JSON schemas, regexes, EBNF grammars and structural tags behind SGLang's reasoning
    wrapper: no condition holds them back, and there is nothing of the kind left to measure."""
    assert requests_check.CONDITIONS == ()
    for options in ({"reasoning_parser": "qwen3"}, {"reasoning_parser": None}, {}):
        requests_check.check({"require_reasoning": True}, {name: value}, options=options)
    for measure in ("grammar_under_reasoning", "structural_tag_under_reasoning"):
        with pytest.raises(ValueError, match=requests_check.MEASURE_OPTION):
            requests_check.measured_names(measure)
    with pytest.raises(RequestRefused, match=f"^{name}.*not accepted"):  # still type-checked
        requests_check.check({}, {name: 7}, options={"reasoning_parser": "qwen3"})


@pytest.mark.parametrize("name,value", GRAMMARS)
def test_a_condition_refuses_its_parameters_on_a_server_with_its_option_until_measured(condition, name, value):
    options = {condition.option: "qwen3"}
    requests_check.check({}, {name: value})  # verified without the option
    requests_check.check({}, {name: value}, options={condition.option: None})
    requests_check.check({}, {name: None}, options=options)  # unset: nothing to refuse
    with pytest.raises(RequestRefused, match=f"^{name}.*on a server with {condition.flag()}") as err:
        requests_check.check({}, {name: value}, options=options)
    assert f"Fix: {condition.fix}" in str(err.value)
    requests_check.check({}, {name: value}, options=options, measured=frozenset({condition.name}))
    with pytest.raises(RequestRefused, match=f"^{name}.*not accepted"):  # still type-checked where measured
        requests_check.check({}, {name: 7}, options=options, measured=frozenset({condition.name}))
    requests_check.check({}, {"temperature": 0.5}, options=options)  # parameters it does not name: served


def test_a_condition_is_measurable_by_name_and_nothing_else_is_added(condition):
    assert requests_check.measured_names(condition.name) == {condition.name}
    assert requests_check.measurable_names() == {condition.name}
    with pytest.raises(ValueError, match=requests_check.MEASURE_OPTION):
        requests_check.measured_names(f"{condition.name},{condition.option}")


def test_a_condition_is_in_the_generated_table(condition):
    table = requests_check.conditions_table()
    assert requests_check.NO_CONDITION not in table and table.count("\n") == 3
    assert table.splitlines()[2].startswith(f"| `{condition.flag()}` | `json_schema`, `regex`")
    assert f"`{requests_check.MEASURE_OPTION} {condition.name}` ({condition.measure})" in table


def test_min_new_tokens_needs_the_servers_tokenizer():
    requests_check.check({}, {"min_new_tokens": 4})
    requests_check.check({}, {"min_new_tokens": 0}, has_tokenizer=False)
    with pytest.raises(RequestRefused, match="^min_new_tokens .*--skip-tokenizer-init"):
        requests_check.check({}, {"min_new_tokens": 4}, has_tokenizer=False)


def test_only_measurable_parameters_can_be_measured(measurable):
    assert requests_check.measured_names(None) == frozenset() == requests_check.measured_names(" , ")
    assert requests_check.measured_names(f" {measurable} ,") == {measurable}
    assert measurable in requests_check.measurable_names()
    for value in ("lora_path", f"{measurable},bogus", "custom_params"):  # refused without a measure, or unknown
        with pytest.raises(ValueError, match=requests_check.MEASURE_OPTION):
            requests_check.measured_names(value)
    with pytest.raises(ValueError, match=r"names regex, which .*\(regex: verified or free, served without it\)"):
        requests_check.measured_names(f"{measurable},regex")  # verified: nothing left to measure
    with pytest.raises(ValueError, match=r"names token_ids_logprob, top_logprobs_num, .*served without it"):
        requests_check.measured_names("top_logprobs_num,token_ids_logprob")  # measured by scenario n, now verified


def test_measuring_works_with_nothing_to_measure(monkeypatch):
    """No row with a ``measure`` and no condition: ``--corun-measure`` accepts no name, every request is checked
    as before, and the conditions' table is its header and a row that says there is none."""
    parameters = tuple(dataclasses.replace(p, measure="") for p in requests_check.PARAMETERS)
    monkeypatch.setattr(requests_check, "PARAMETERS", parameters)
    monkeypatch.setattr(requests_check, "TABLE", {(p.where, p.name): p for p in parameters})
    monkeypatch.setattr(requests_check, "CONDITIONS", ())
    assert requests_check.measurable_names() == frozenset() == requests_check.measured_names(None)
    with pytest.raises(ValueError, match="which no GPU queue chunk measures; measurable: none$"):
        requests_check.measured_names("grammar_under_reasoning")
    requests_check.check({"return_logprob": True, "top_logprobs_num": 5}, {"regex": "[a-z]+"},
                         options={"reasoning_parser": "qwen3"})
    with pytest.raises(RequestRefused, match="^return_entropy"):
        requests_check.check({"return_entropy": True}, {}, measured=frozenset({"return_entropy"}))
    table = requests_check.conditions_table()
    assert table.count("\n") == 3 and table.splitlines()[2] == requests_check.NO_CONDITION


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
    requests_check.check({"return_logprob": True, "top_logprobs_num": 3}, {})
    with pytest.raises(RequestRefused) as err:
        requests_check.check({"return_logprob": True, "top_logprobs_num": requests_check.TOP_LOGPROBS_MAX + 1}, {})
    assert str(err.value).startswith("top_logprobs_num (OpenAI logprobs / top_logprobs): 65 is not accepted")


@pytest.mark.parametrize("fields,k", [({"logprobs": 5, "echo": True}, 5), ({"logprobs": 0}, 0), ({}, 0)])
def test_openai_completions_logprobs_are_served_as_top_logprobs_num(fields, k):
    import types

    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion

    serving = OpenAIServingCompletion.__new__(OpenAIServingCompletion)
    serving.template_manager = types.SimpleNamespace(completion_template_name=None)
    serving.allowed_custom_labels = None
    obj = serving._convert_to_internal_request(CompletionRequest(prompt=[1, 2, 3], max_tokens=4, **fields))[0]
    assert obj.top_logprobs_num == k
    requests_check.check({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}, obj.sampling_params, 3)


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
        "docs/requests.md is out of date: run python -m corun_sglang.core.requests_check docs/requests.md")


def test_the_document_holds_the_generated_conditions():
    assert requests_check.conditions_table() in DOC.read_text(), (
        "docs/requests.md is out of date: run python -m corun_sglang.core.requests_check docs/requests.md")


def test_the_generator_rewrites_both_tables_in_place(tmp_path):
    """``write_tables`` replaces each generated table's run of lines, found by its header, and keeps the rest of
    the file byte for byte; run again, it changes nothing."""
    text = DOC.read_text()
    parameters, conditions = requests_check.markdown_table(), requests_check.conditions_table()
    row = next(line for line in parameters.splitlines() if line.startswith("| `top_logprobs_num` |"))
    stale = text.replace(row + "\n", "").replace(parameters.splitlines()[2], row.replace("verified", "refused"))
    stale = stale.replace(conditions, conditions.splitlines()[0] + "\n| --- |\n| `--stale` | old |\n")
    assert parameters not in stale and conditions not in stale
    doc = tmp_path / "requests.md"
    doc.write_text(stale)
    assert requests_check.write_tables(str(doc)) is True
    written = doc.read_text()
    assert written == text
    assert parameters in written and conditions in written
    assert requests_check.write_tables(str(doc)) is False and doc.read_text() == text
    doc.write_text(text.replace(conditions.splitlines()[0], "| option |"))  # a header that is not there: refused
    with pytest.raises(ValueError, match="0 lines are the header"):
        requests_check.write_tables(str(doc))


def test_the_table_lists_every_row_once():
    table = requests_check.markdown_table()
    for p in requests_check.PARAMETERS:
        assert table.count(f"| `{p.name}` |") == 1
    assert {p.status for p in requests_check.PARAMETERS} == {VERIFIED, FREE, REFUSED}
