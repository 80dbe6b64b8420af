"""Request bodies a ``--corun`` server must answer, each with the status it must get.

``CASES`` is plain data (JSON bodies), shared by the CPU tests, which drive them through SGLang's
own request classes and ``requests_check``, and by the GPU test, which sends them to a live server
while seeded co-runners decode. A refused case (status 400) names, in ``names``, what its error
message must mention. Native ``/generate`` streaming answers a refusal with HTTP 200 and one
``data:`` event whose ``error.code`` is 400 (SGLang's own behaviour); every other refusal is an
HTTP 400.
"""

from __future__ import annotations

import dataclasses
import json

from corun_sglang.core import requests_check

GENERATE, COMPLETIONS, CHAT = "/generate", "/v1/completions", "/v1/chat/completions"

#: A short prompt of token ids inside any test vocabulary.
PROMPT = [11, 12, 13, 14, 15, 16, 17, 18]

#: A tool the chat cases force a call of (``tool_choice``).
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: dict
    status: int  # 200 served, 400 refused
    names: tuple[str, ...] = ()  # what a refusal's message mentions


def _gen(name, params=None, status=400, names=(), **fields):
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 4, **(params or {})}, **fields}
    return Case(f"generate-{name}", GENERATE, body, status, tuple(names))


def _cmp(name, status=400, names=(), **fields):
    return Case(f"completions-{name}", COMPLETIONS, {"prompt": PROMPT, "max_tokens": 4, **fields}, status, tuple(names))


def _chat(name, status=400, names=(), **fields):
    body = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4, **fields}
    return Case(f"chat-{name}", CHAT, body, status, tuple(names))


#: One value per refused sampling parameter that differs from SGLang's default.
REFUSED_SAMPLING_VALUES = {
    "custom_params": {"k": 1}, "stop_strs": ["x"], "stop_regex_strs": ["x"], "stop_str_max_len": 3,
    "stop_regex_max_len": 3, "is_normalized": True,
}

#: One valid grammar per verified structured-output parameter (the structural tag in SGLang's legacy form, which
#: lets text run free until its trigger).
GRAMMAR_VALUES = {
    "json_schema": '{"type": "object"}', "regex": "[a-z]+", "ebnf": 'root ::= "the" | "of"',
    "structural_tag": '{"type": "structural_tag", "structures": [{"begin": "<a>", "schema": {"type": "object"}, '
                      '"end": "</a>"}], "triggers": ["<a>"]}',
}

#: One value per refused request field that differs from SGLang's default.
REFUSED_REQUEST_VALUES = {
    "return_sampling_mask": True, "return_flat_raw_top_logprobs": True, "return_flat_raw_top_logprobs_b64": True,
    "return_entropy": True, "return_hidden_states": True, "return_routed_experts": True, "routed_experts_start_len": 1,
    "return_indexer_topk": True, "lora_path": "adapter", "lora_id": "adapter", "custom_logit_processor": "{}",
    "max_thinking_tokens": 8, "input_embeds": [[0.0, 1.0]], "positional_embed_overrides": [[0.0]],
    "image_data": "http://example.invalid/a.png", "video_data": "v.mp4", "audio_data": "a.wav",
    "mm_hashes": ["h"], "modalities": ["image"], "use_audio_in_video": True, "max_dynamic_patch": 4,
    "min_dynamic_patch": 1, "image_max_dynamic_patch": 4, "video_max_dynamic_patch": 4, "images_config": {"a": 1},
    "need_wait_for_mm_inputs": True, "num_items_assigned": {"image": [1]}, "mm_data_mooncake": [1],
    "encoder_urls": ["http://example.invalid"], "multi_item_delimiter_indices": [1], "session_id": "s",
    "session_params": {"id": "s"}, "bootstrap_host": "h", "bootstrap_port": 1, "bootstrap_room": 1,
    "bootstrap_pair_key": "k", "decode_tp_size": 2, "disagg_prefill_dp_rank": 1, "priority": 1,
}


def _cases() -> tuple[Case, ...]:
    seeds = [("minus-one", -1), ("2-63", 1 << 63), ("2-70", 1 << 70), ("string", "abc"), ("numeric-string", "7"),
             ("float", 1.5), ("whole-float", 7.0), ("true", True)]
    cases = [
        _gen("plain", {"temperature": 0.7, "sampling_seed": 3}, 200, return_logprob=True),
        _gen("verified-all", {"temperature": 0.8, "top_p": 0.9, "top_k": 50, "min_p": 0.05, "sampling_seed": 5,
                              "ignore_eos": True}, 200, return_logprob=True, logprob_start_len=-1),
        _gen("free-all", {"stop": ["zz"], "stop_token_ids": [2], "stop_regex": "q+", "skip_special_tokens": False,
                          "spaces_between_special_tokens": False, "no_stop_trim": True, "stream_interval": 2,
                          "sampling_seed": 0}, 200, return_text_in_logprobs=True, rid="free-all"),
        _gen("verified-penalties", {"frequency_penalty": 0.5, "presence_penalty": -0.5, "repetition_penalty": 1.1,
                                    "min_new_tokens": 2, "logit_bias": {"11": 1.0}, "sampling_seed": 6}, 200,
             return_logprob=True),
        *[_gen(f"verified-{name}", {name: value, "sampling_seed": 10}, 200) for name, value in GRAMMAR_VALUES.items()],
        _gen("defaults-explicit", {"frequency_penalty": 0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
                                   "min_new_tokens": 0, "json_schema": None, "logit_bias": None}, 200,
             top_logprobs_num=0, return_hidden_states=False),
        _gen("seed-null", {"sampling_seed": None}, 200),
        _gen("seed-largest", {"sampling_seed": (1 << 63) - 1}, 200),
        _gen("n2-rid", {"n": 2, "sampling_seed": 7, "temperature": 0.9}, 200, rid="corpus-n2"),
        _gen("batch-ok", {"sampling_seed": 9}, 200, input_ids=[PROMPT, PROMPT[:4]]),
        _gen("stream-ok", {"sampling_seed": 4}, 200, stream=True),
        *[_gen(f"seed-{label}", {"sampling_seed": value}, names=["sampling_seed"]) for label, value in seeds],
        _gen("seed-stream", {"sampling_seed": "abc"}, names=["sampling_seed"], stream=True),
        _gen("seed-n2", {"sampling_seed": -1, "n": 2}, names=["sampling_seed"]),
        _gen("seed-batch", {"sampling_seed": 2 ** 70}, names=["sampling_seed"], input_ids=[PROMPT, PROMPT[:4]]),
        _gen("batch-list-params", None, names=["custom_params"], input_ids=[PROMPT, PROMPT[:4]],
             sampling_params=[{"max_new_tokens": 4, "regex": "[a-z]+"},
                              {"max_new_tokens": 4, "custom_params": {"k": 1}}]),
        # two grammars in one request: SGLang's own check refuses them
        _gen("two-grammars", {"regex": "[a-z]+", "ebnf": 'root ::= "the"'}, names=["regex", "ebnf"]),
        _gen("n-string", {"n": "2"}, names=["n"]),
        _gen("n-null", {"n": None}, names=["n"]),
        _gen("n-float", {"n": 2.5}, names=["n"]),
        _gen("n-zero", {"n": 0}, names=["n"]),
        _gen("temperature-string", {"temperature": "hot"}, names=["temperature"]),
        _gen("top-k-float", {"top_k": 2.5}, names=["top_k"]),
        _gen("max-new-tokens-string", {"max_new_tokens": "4"}, names=["max_new_tokens"]),
        _gen("ignore-eos-string", {"ignore_eos": "yes"}, names=["ignore_eos"]),
        _gen("stop-number", {"stop": 5}, names=["stop"]),
        _gen("unknown-param", {"bogus": 1}, names=["bogus"]),
        _gen("prompt-logprobs", None, 200, return_logprob=True, logprob_start_len=0),
        _gen("top-logprobs", {"sampling_seed": 12}, 200, return_logprob=True, logprob_start_len=0,
             top_logprobs_num=requests_check.TOP_LOGPROBS_MAX, token_ids_logprob=[11, 12]),
        _gen("top-logprobs-over-limit", None, names=["top_logprobs_num"], return_logprob=True,
             top_logprobs_num=requests_check.TOP_LOGPROBS_MAX + 1),
        _gen("token-ids-logprob-string", None, names=["token_ids_logprob"], return_logprob=True,
             token_ids_logprob=["a"]),
        # (a numeric string such as "0" reaches the check already an int: SGLang's HTTP layer parses typed fields)
        _gen("prompt-logprobs-string", None, names=["logprob_start_len"], return_logprob=True, logprob_start_len="first"),
        _gen("penalty-n2", {"presence_penalty": 0.5, "n": 2, "sampling_seed": 8}, 200),
        *[_gen(f"refused-{name}", {name: value}, names=[name]) for name, value in REFUSED_SAMPLING_VALUES.items()],
        # SGLang's own LoRA check answers lora_path first (LoRA is refused at startup under --corun)
        *[_gen(f"refused-{name}", None, names=["LoRA" if name == "lora_path" else name], **{name: value})
          for name, value in REFUSED_REQUEST_VALUES.items() if name != "input_embeds"],
        _gen("refused-input_embeds", None, names=["input_embeds"], input_ids=None, input_embeds=[[0.0, 1.0]]),
        # OpenAI completions
        _cmp("ok", 200, seed=5, temperature=0.7, logprobs=0),
        _cmp("stream-ok", 200, seed=5, stream=True),
        _cmp("n2", 200, seed=5, n=2, temperature=0.9),
        _cmp("seed-minus-one", names=["seed", "sampling_seed"], seed=-1),
        _cmp("seed-2-70", names=["seed", "sampling_seed"], seed=1 << 70),
        _cmp("seed-stream", names=["seed", "sampling_seed"], seed=1 << 63, stream=True),
        _cmp("top-logprobs", 200, logprobs=2),
        _cmp("top-logprobs-5", 200, logprobs=5, echo=True),
        _cmp("top-logprobs-over-limit", names=["logprobs", "top_logprobs_num"],
             logprobs=requests_check.TOP_LOGPROBS_MAX + 1),
        _cmp("echo-logprobs", 200, echo=True, logprobs=0),
        _cmp("penalty", 200, seed=5, frequency_penalty=0.3),
        _cmp("response-format", 200, seed=5, response_format={"type": "json_object"}),
        _cmp("regex", 200, seed=5, regex="[a-z]+"),
        _cmp("logit-bias", 200, seed=5, logit_bias={"11": 2.0}),
        _cmp("min-tokens", 200, seed=5, min_tokens=2),
        # OpenAI chat
        _chat("ok", 200, seed=5, temperature=0.6, logprobs=True),
        _chat("stream-ok", 200, seed=5, stream=True),
        _chat("seed-minus-one", names=["seed", "sampling_seed"], seed=-1),
        _chat("seed-stream", names=["seed", "sampling_seed"], seed=1 << 70, stream=True),
        _chat("top-logprobs", 200, logprobs=True, top_logprobs=3),
        _chat("response-format", 200, seed=5, response_format={"type": "json_object"}),
        _chat("response-format-schema", 200, seed=5, response_format={
            "type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}),
        _chat("response-format-structural-tag", 200, seed=5,
              response_format=json.loads(GRAMMAR_VALUES["structural_tag"])),
        _chat("tool-call-forced", 200, seed=5, tools=[TOOL],
              tool_choice={"type": "function", "function": {"name": "get_weather"}}),
        _chat("top-logprobs-20", 200, logprobs=True, top_logprobs=20),
        _chat("top-logprobs-over-limit", names=["top_logprobs", "top_logprobs_num"], logprobs=True,
              top_logprobs=requests_check.TOP_LOGPROBS_MAX + 1),
        _chat("regex", 200, seed=5, regex="[a-z]+"),
        _chat("ebnf", 200, seed=5, ebnf='root ::= "the" | "of"'),
        _chat("repetition", 200, seed=5, repetition_penalty=1.2),
        _chat("n2-penalty", 200, seed=5, n=2, presence_penalty=0.5),
    ]
    return tuple(cases)


CASES: tuple[Case, ...] = _cases()

#: Every refused parameter has a case here (the tests check it against ``requests_check.PARAMETERS``).
REFUSED_COVERED = frozenset(REFUSED_SAMPLING_VALUES) | frozenset(REFUSED_REQUEST_VALUES)
assert REFUSED_COVERED == {p.name for p in requests_check.PARAMETERS if p.status == requests_check.REFUSED}
