"""What a request may ask of a ``--corun`` server: one table of every parameter, and the check of one request.

Pure: nothing here imports SGLang. ``PARAMETERS`` classifies every parameter of SGLang 0.5.17's
``SamplingParams`` (``where="sampling_params"``) and every field of its ``GenerateReqInput``
(``where="request"``) as

- ``VERIFIED``: the GPU determinism suite ran it among co-runners, bitwise identical to its run alone;
- ``FREE``: it only formats the request's own output, or ends the request on its own tokens exactly as
  EOS and ``max_new_tokens`` do, or only carries the request; it reaches no forward pass of a co-runner;
- ``REFUSED``: no evidence under ``--corun``; a request that sets it away from SGLang's default is refused.

A refused parameter whose mechanism ``--corun`` makes row-local but that no GPU run has compared among
co-runners yet may name the queue chunk that measures it (``Param.measure``). That chunk's servers name it in
``--corun-measure``, and only there such a parameter is served (type-checked as a verified one would be);
such a server says so in its log, its ``/server_info`` and its ``system_fingerprint``. A server option that
moves verified parameters onto a path no GPU run has compared (``CONDITIONS``) is measured the same way, by
name. It may be that no row has a ``measure`` and ``CONDITIONS`` is empty: then a server accepts no name in
``--corun-measure``.

Invariants of ``problems()`` (``check()`` raises them as one ``RequestRefused``, a ``ValueError`` that
SGLang's HTTP server answers with a 400):
- every message starts with the parameter's name (and its OpenAI name where that differs);
- a seed is an ``int`` (never a bool, float or string) with ``0 <= seed < 2**63``; anything else is
  refused, never folded into range;
- a verified or free parameter of the wrong type is refused before SGLang reads it;
- a sampling parameter the table does not know is refused (SGLang would raise a ``TypeError``);
- a refused parameter is served only where ``measured`` names it and it has a ``measure`` chunk;
- a verified parameter a ``Condition`` names is refused on a server whose option that condition names is set,
  unless ``measured`` names the condition;
- a served parameter that SGLang reads the scheduler's tokenizer for (``NEEDS_TOKENIZER``) is refused on a
  server without one, where it would crash the scheduler for every co-runner.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Optional, Union

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter, ValidationError, confloat
from typing_extensions import Annotated

VERIFIED, FREE, REFUSED = "verified", "free", "refused"

#: Seeds are 63-bit: ``0 <= seed < SEED_LIMIT`` (``seeds.SEED_MASK`` + 1; they travel as int64).
SEED_LIMIT = 1 << 63

_SUITE = "docs/results/determinism.md"
_CORE = "docs/results/determinism_core.md"

_Number = Union[StrictInt, StrictFloat]
_Strings = Union[StrictStr, list[StrictStr]]
_Seed = Annotated[StrictInt, Field(ge=0, lt=SEED_LIMIT)]
_Finite = Union[StrictInt, confloat(strict=True, allow_inf_nan=False)]

#: The server option a GPU queue chunk names the refused parameters it measures with (comma-separated).
MEASURE_OPTION = "--corun-measure"

#: The most top-k logprobs a request may ask for per position (the GPU suite runs 0 to this many).
TOP_LOGPROBS_MAX = 64


@dataclasses.dataclass(frozen=True)
class Param:
    """One row: a parameter, where it travels, its class, and the evidence (VERIFIED), reason (FREE) or
    why it is refused (REFUSED) with its fix. ``accepts``: the type a set value must have (strict)."""

    name: str
    where: str  # "sampling_params" or "request"
    status: str
    note: str
    fix: str = ""
    openai: str = ""  # the OpenAI API's name(s), where they differ
    accepts: Any = None
    measure: str = ""  # refused, row-local under --corun: the GPU queue chunk(s) that compare it among co-runners

    def label(self) -> str:
        return f"{self.name} (OpenAI {self.openai})" if self.openai else self.name

    def refusal(self) -> str:
        return f"{self.label()}: not verified under --corun ({self.note}). Fix: {self.fix}"


def _sp(name, status, note, fix="", openai="", accepts=None, measure=""):
    return Param(name, "sampling_params", status, note, fix, openai, accepts, measure)


def _rq(name, status, note, fix="", openai="", accepts=None, measure=""):
    return Param(name, "request", status, note, fix, openai, accepts, measure)


_DROP = "drop it, or serve this request without --corun"
_SURFACE_RUN = "SmolLM2-135M-Instruct on an H100"
_GRAMMAR_RUN = "SmolLM2-135M-Instruct on an H200"
_PENALTY = ("row-local under --corun (a penalizer row counts the request's own earlier outputs, fed at each step's "
            "launch: adapters.penalties); needles with each penalty and all three among co-runners with other "
            "penalties and none, arriving as they ran: 0 of 12 divergent, default SGLang 11 of 12 "
            f"({_SUITE} o, {_SURFACE_RUN})")
_MIN_BIAS = ("needles with min_new_tokens against a boosted EOS, and biases that ban or boost tokens, among "
             "co-runners with other minimums and biases and none: 0 of 8 divergent, default SGLang 4 of 8 "
             f"({_SUITE} p, {_SURFACE_RUN})")
_GRAMMAR = ("row-local (the grammar backend, xgrammar, fills the request's own bitmask row after its previous "
            "token is accepted, SGLang delaying a grammar batch's sampling for that, and sets that row's "
            "disallowed logits to -inf)")
_GRAMMARS = ("needles with a JSON schema, a regex and an EBNF grammar among co-runners with other grammars and "
             f"none: 0 of 12 divergent, default SGLang 3 of 12 ({_SUITE} q, {_GRAMMAR_RUN})")
_OPENAI_GRAMMARS = ("the openai client's forced tool calls (tools with a forced tool_choice, a structural tag under "
                    "--tool-call-parser) and a JSON-schema response_format, alone vs among 48 concurrent clients "
                    f"and 64 others: 0 of 10 divergent, default SGLang 7 of 10 ({_SUITE} r, {_GRAMMAR_RUN})")
_REASONING_GRAMMARS = ("behind a reasoning parser (SGLang's reasoning wrapper: no mask while the request's own "
                       "reasoning runs, require_reasoning, its grammar once its own tokens close the think tag), "
                       "needles among co-runners with grammars behind reasoning, grammars alone and none: 0 of 18 "
                       f"divergent, default SGLang 7 of 18 ({_SUITE} t, {_GRAMMAR_RUN}, --reasoning-parser qwen3)")
_REASONING_TOOL = ("behind a reasoning parser the same wrapper, scenario t's needle that reasons and then calls a tool "
                   "(a format-form structural tag) among co-runners that do, with grammars behind reasoning and none "
                   f"({_SUITE} t, {_GRAMMAR_RUN}, --reasoning-parser qwen3)")
_TOPK_EVIDENCE = ("needles asking 1 to 20 top-k logprobs per position (prompt top-k among them, chosen "
                  "token_ids_logprob, a regex needle whose disallowed tokens tie at -inf) among co-runners asking "
                  "0 to 64: 0 of 8 divergent, default SGLang 7 of 8, overlap proven (67 running >= 8) "
                  f"({_SUITE} n, {_SURFACE_RUN})")
_FLAT = "flat raw top-k logprobs (a path of their own) were not compared among co-runners"
_INTERNAL = "an internal field of SGLang's SamplingParams that SGLang sets itself"
_MM = "multimodal inputs run an encoder and embed into the prompt, a path the suite did not run"
_PD = "PD disaggregation is refused at startup under --corun"

PARAMETERS: tuple[Param, ...] = (
    # ------------------------------------------------------------ SamplingParams
    _sp("max_new_tokens", VERIFIED, f"every scenario of {_SUITE} and {_CORE} (16 to 1024 new tokens)",
        openai="max_tokens / max_completion_tokens", accepts=Optional[Annotated[StrictInt, Field(ge=0)]]),
    _sp("temperature", VERIFIED, f"greedy, 0.5, 0.6, 0.8 and 1.0 among co-runners ({_SUITE} a-i, {_CORE})",
        accepts=Optional[_Number]),
    _sp("top_p", VERIFIED, f"0.3 to 0.95 among co-runners of mixed filters ({_SUITE} i; {_CORE} filtered)",
        accepts=Optional[_Number]),
    _sp("top_k", VERIFIED, f"20 and 50 among co-runners of mixed filters ({_SUITE} i; {_CORE} filtered)",
        accepts=Optional[StrictInt]),
    _sp("min_p", VERIFIED, f"0.05 among co-runners of mixed filters ({_SUITE} i; {_CORE} filtered)",
        accepts=Optional[_Number]),
    _sp("sampling_seed", VERIFIED, f"a seed per request in every sampled scenario ({_SUITE}, {_CORE})",
        openai="seed", accepts=Optional[_Seed]),
    _sp("ignore_eos", VERIFIED, f"set in every scenario of {_SUITE} and {_CORE}", accepts=Optional[StrictBool]),
    _sp("n", VERIFIED, f"n = 4 reproducible, four distinct samples ({_SUITE} g)",
        accepts=Annotated[StrictInt, Field(ge=1)]),
    _sp("stop", FREE, "ends the request on its own decoded text, as EOS does", accepts=Optional[_Strings]),
    _sp("stop_token_ids", FREE, "ends the request on its own tokens, as EOS does",
        accepts=Optional[Union[list[StrictInt], set[StrictInt]]]),
    _sp("stop_regex", FREE, "ends the request on its own decoded text, as EOS does", accepts=Optional[_Strings]),
    _sp("skip_special_tokens", FREE, "formats the request's own detokenized text", accepts=Optional[StrictBool]),
    _sp("spaces_between_special_tokens", FREE, "formats the request's own detokenized text",
        accepts=Optional[StrictBool]),
    _sp("no_stop_trim", FREE, "formats the request's own text (keeps the stop string)", accepts=Optional[StrictBool]),
    _sp("stream_interval", FREE, "how often the request's own output is sent; no forward pass reads it",
        accepts=Optional[Annotated[StrictInt, Field(ge=1)]]),
    _sp("frequency_penalty", VERIFIED, _PENALTY, accepts=Optional[_Finite]),
    _sp("presence_penalty", VERIFIED, _PENALTY, accepts=Optional[_Finite]),
    _sp("repetition_penalty", VERIFIED, _PENALTY, accepts=Optional[_Finite]),
    _sp("min_new_tokens", VERIFIED, "row-local under --corun (it masks the request's own stop tokens until its own "
        "output count reaches it, fed once per step: adapters.penalties); " + _MIN_BIAS, openai="min_tokens",
        accepts=Optional[Annotated[StrictInt, Field(ge=0)]]),
    _sp("logit_bias", VERIFIED, "row-local (the request's own bias row is added to its own logits); " + _MIN_BIAS,
        accepts=Optional[dict[Annotated[StrictStr, Field(pattern=r"^[0-9]+$")], _Finite]]),
    _sp("json_schema", VERIFIED, f"{_GRAMMAR}; {_GRAMMARS}; {_OPENAI_GRAMMARS}; {_REASONING_GRAMMARS}",
        openai="response_format / tools", accepts=Optional[StrictStr]),
    _sp("regex", VERIFIED, f"{_GRAMMAR}; {_GRAMMARS}; {_REASONING_GRAMMARS}", accepts=Optional[StrictStr]),
    _sp("ebnf", VERIFIED, f"{_GRAMMAR}; {_GRAMMARS}; {_REASONING_GRAMMARS}", accepts=Optional[StrictStr]),
    _sp("structural_tag", VERIFIED, f"{_GRAMMAR}; {_OPENAI_GRAMMARS}; {_REASONING_TOOL}",
        openai="response_format / tools", accepts=Optional[StrictStr]),
    _sp("custom_params", REFUSED, "it feeds custom logit processors", "drop it"),
    _sp("stop_strs", REFUSED, _INTERNAL, "use stop"),
    _sp("stop_regex_strs", REFUSED, _INTERNAL, "use stop_regex"),
    _sp("stop_str_max_len", REFUSED, _INTERNAL, "drop it"),
    _sp("stop_regex_max_len", REFUSED, _INTERNAL, "drop it"),
    _sp("is_normalized", REFUSED, _INTERNAL, "drop it"),
    # ------------------------------------------------------------ GenerateReqInput
    _rq("return_logprob", VERIFIED, f"the sampled tokens' logprobs, compared as bits in every scenario ({_SUITE})",
        openai="logprobs", accepts=Optional[StrictBool]),
    _rq("logprob_start_len", VERIFIED, "prompt logprobs: a prompt's prefill runs alone (isolated prefill) or "
        "at the pack's fixed shape, and verify-prefill-pack compares every needle's prompt logprobs as bits, "
        "alone and packed (docs/results/prefill_pack.md)", openai="echo with logprobs",
        accepts=Optional[StrictInt]),
    _rq("top_logprobs_num", VERIFIED, "row-local under --corun: top-k in (value, token id) order, fixed by the "
        "request's own row (adapters.logprobs); " + _TOPK_EVIDENCE, openai="logprobs / top_logprobs",
        accepts=Optional[Annotated[StrictInt, Field(ge=0, le=TOP_LOGPROBS_MAX)]]),
    _rq("token_ids_logprob", VERIFIED, "row-local: a gather from the request's own logprob row, and a batch that "
        "mixes it with requests without it is served (stock SGLang 0.5.17's scheduler dies on one, sglang#35705; "
        "adapters.logprobs); " + _TOPK_EVIDENCE, accepts=Optional[list[StrictInt]]),
    _rq("return_sampling_mask", REFUSED, "the sampling mask was not compared among co-runners", _DROP),
    _rq("return_flat_raw_top_logprobs", REFUSED, _FLAT, _DROP),
    _rq("return_flat_raw_top_logprobs_b64", REFUSED, _FLAT, _DROP),
    _rq("return_entropy", REFUSED, "entropies were not compared among co-runners", _DROP),
    _rq("return_hidden_states", REFUSED, "returning hidden states changes what the forward pass keeps", _DROP),
    _rq("return_routed_experts", REFUSED, "routed-expert capture was not run among co-runners", _DROP),
    _rq("routed_experts_start_len", REFUSED, "routed-expert capture was not run among co-runners", _DROP),
    _rq("return_indexer_topk", REFUSED, "indexer top-k capture was not run among co-runners", _DROP),
    _rq("lora_path", REFUSED, "LoRA adapters are refused at startup under --corun", "drop it",
        openai="model 'base:adapter' / lora_path"),
    _rq("lora_id", REFUSED, "LoRA adapters are refused at startup under --corun", "drop it"),
    _rq("custom_logit_processor", REFUSED, "custom logit processors run arbitrary code on batch logits", "drop it"),
    _rq("max_thinking_tokens", REFUSED, "the thinking budget runs as a custom logit processor", "drop it"),
    _rq("input_embeds", REFUSED, "input embeddings bypass the embedding layer the suite ran", "send text or input_ids"),
    _rq("positional_embed_overrides", REFUSED, "embedding overrides bypass the embedding layer the suite ran",
        "drop it"),
    _rq("image_data", REFUSED, _MM, "send text only"),
    _rq("video_data", REFUSED, _MM, "send text only"),
    _rq("audio_data", REFUSED, _MM, "send text only"),
    _rq("mm_hashes", REFUSED, _MM, "send text only"),
    _rq("modalities", REFUSED, _MM, "send text only"),
    _rq("use_audio_in_video", REFUSED, _MM, "drop it"),
    _rq("max_dynamic_patch", REFUSED, _MM, "drop it"),
    _rq("min_dynamic_patch", REFUSED, _MM, "drop it"),
    _rq("image_max_dynamic_patch", REFUSED, _MM, "drop it"),
    _rq("video_max_dynamic_patch", REFUSED, _MM, "drop it"),
    _rq("images_config", REFUSED, _MM, "drop it"),
    _rq("need_wait_for_mm_inputs", REFUSED, "encoder disaggregation is not served under --corun", "drop it"),
    _rq("num_items_assigned", REFUSED, "encoder disaggregation is not served under --corun", "drop it"),
    _rq("mm_data_mooncake", REFUSED, "encoder disaggregation is not served under --corun", "drop it"),
    _rq("encoder_urls", REFUSED, "encoder disaggregation is not served under --corun", "drop it"),
    _rq("multi_item_delimiter_indices", REFUSED, "multi-item scoring was not run among co-runners", "drop it"),
    _rq("session_id", REFUSED, "a session reuses an earlier request's KV cache, so the prefill depends on it",
        "send each request on its own"),
    _rq("session_params", REFUSED, "a session reuses an earlier request's KV cache, so the prefill depends on it",
        "send each request on its own"),
    _rq("bootstrap_host", REFUSED, _PD, "drop it"),
    _rq("bootstrap_port", REFUSED, _PD, "drop it"),
    _rq("bootstrap_room", REFUSED, _PD, "drop it"),
    _rq("bootstrap_pair_key", REFUSED, _PD, "drop it"),
    _rq("decode_tp_size", REFUSED, _PD, "drop it"),
    _rq("disagg_prefill_dp_rank", REFUSED, _PD, "drop it"),
    _rq("priority", REFUSED, "priority scheduling can preempt running requests", "drop it"),
    _rq("stream", FREE, "how the request's own output is delivered; no forward pass reads it"),
    _rq("return_text_in_logprobs", FREE, "formats the request's own logprobs"),
    _rq("return_prompt_token_ids", FREE, "returns the request's own prompt ids; no logprob is computed"),
    _rq("return_bytes", FREE, "formats the request's own output"),
    _rq("rid", FREE, "names the request; seeds never depend on it (n > 1 children are seeded by position)"),
    _rq("text", FREE, "the request's own prompt"),
    _rq("input_ids", FREE, "the request's own prompt"),
    _rq("sampling_params", FREE, "carries the parameters above, each checked on its own row"),
    _rq("log_metrics", FREE, "server metrics only"),
    _rq("no_logs", FREE, "server logging only"),
    _rq("custom_labels", FREE, "metric labels only"),
    _rq("external_trace_header", FREE, "tracing only"),
    _rq("received_time", FREE, "a timestamp for metrics"),
    _rq("http_worker_ipc", FREE, "routes the output back to the HTTP worker"),
    _rq("conversation_id", FREE, "tracking only"),
    _rq("background", FREE, "how the Responses API delivers the output"),
    _rq("extra_key", FREE, "a radix-cache namespace; the radix cache is off under --corun", openai="cache_salt"),
    _rq("routing_key", FREE, f"orders waiting requests only; order changes nothing under --corun ({_SUITE} c)"),
    _rq("routed_dp_rank", FREE, "picks a data-parallel rank; --corun serves one (SGLang refuses any rank but 0)"),
    _rq("require_reasoning", FREE, "read only by the request's own grammar (on a server with a --reasoning-parser, "
        f"where {_SUITE} t ran it among co-runners) and SGLang's count of the request's own reasoning "
        "tokens"),
)

TABLE: dict[tuple[str, str], Param] = {(p.where, p.name): p for p in PARAMETERS}


@dataclasses.dataclass(frozen=True)
class Condition:
    """A server option that moves verified sampling parameters onto a path no GPU run has compared among
    co-runners: on a server with ``option`` set they are refused, and served only where ``measured`` names
    ``name`` (the queue chunk ``measure`` runs them there)."""

    name: str  # as ``MEASURE_OPTION`` names it
    option: str  # the ServerArgs field
    params: tuple[str, ...]  # sampling parameters
    note: str
    fix: str
    measure: str

    def flag(self) -> str:
        return "--" + self.option.replace("_", "-")

    def refusal(self, param: Param) -> str:
        return (f"{param.label()}: not verified under --corun on a server with {self.flag()} ({self.note}). "
                f"Fix: {self.fix}")


#: Server options that move verified parameters onto a path no GPU run has compared; empty while every such path
#: is measured (every grammar behind ``--reasoning-parser``: scenario t).
CONDITIONS: tuple[Condition, ...] = ()


class RequestRefused(ValueError):
    """A request ``--corun`` does not serve; the message names each parameter, why, and the fix."""

    def __init__(self, problems: Iterable[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def _blank(value: Any) -> bool:
    if value is None or value is False:
        return True
    if type(value) in (int, float):
        return value == 0
    return isinstance(value, (str, list, tuple, dict, set)) and not value


def is_default(value: Any, default: Any) -> bool:
    """Whether ``value`` leaves a parameter as SGLang's ``default`` does (an empty value counts as unset)."""
    if value is default:
        return True
    try:
        if value == default and type(value) is not bool and not (isinstance(value, float) and math.isnan(value)):
            return True
    except Exception:  # a client value whose comparison fails is not the default
        return False
    return _blank(value) and _blank(default)


_ADAPTERS: dict[str, TypeAdapter] = {}


def _type_problem(param: Param, value: Any) -> str | None:
    if param.accepts is None:
        return None
    adapter = _ADAPTERS.get(param.name)
    if adapter is None:
        adapter = _ADAPTERS[param.name] = TypeAdapter(param.accepts)
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError as exc:
        detail = "; ".join(e["msg"] for e in exc.errors()[:2])
        return f"{param.label()}: {_shown(value)} is not accepted ({detail})"
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def seed_problem(value: Any) -> str | None:
    """Why ``value`` is not a seed (``0 <= seed < 2**63``, an ``int``; None means none given), or None."""
    if value is None or (type(value) is int and 0 <= value < SEED_LIMIT):
        return None
    return (f"sampling_seed (OpenAI seed): {_shown(value)} is not a seed; a seed is an integer with "
            f"0 <= seed < 2**63. Fix: send an integer in that range, or no seed for one derived "
            "from --random-seed and the request")


def n_problem(sampling_params: Any) -> str | None:
    """Why the ``n`` of a request's sampling parameters (a dict, or a list of them) cannot be served, or None."""
    for params in sampling_params if isinstance(sampling_params, list) else [sampling_params]:
        if isinstance(params, Mapping) and "n" in params:
            found = _type_problem(TABLE["sampling_params", "n"], params["n"])
            if found:
                return found + ". Fix: send n as an integer of 1 or more"
    return None


def _refused(param: Param, measured: frozenset) -> bool:
    return param.status == REFUSED and not (param.measure and param.name in measured)


def measurable_names() -> frozenset:
    """What ``MEASURE_OPTION`` may name: each refused parameter with a ``measure`` chunk, and each condition."""
    return frozenset({p.name for p in PARAMETERS if p.measure} | {c.name for c in CONDITIONS})


def measured_names(value: str | None) -> frozenset:
    """The parameters a ``MEASURE_OPTION`` value names; ``ValueError`` for a name no queue chunk measures."""
    names = frozenset(n.strip() for n in (value or "").split(",") if n.strip())
    measurable = measurable_names()
    unknown = sorted(names - measurable)
    if unknown:
        served = sorted(n for n in unknown if any(p.name == n and p.status != REFUSED for p in PARAMETERS))
        because = f" ({', '.join(served)}: {VERIFIED} or {FREE}, served without it)" if served else ""
        raise ValueError(f"{MEASURE_OPTION} names {', '.join(unknown)}, which no GPU queue chunk measures{because}; "
                         f"measurable: {', '.join(sorted(measurable)) or 'none'}")
    return names


def _sampling_problems(params: Mapping[str, Any], preferred: Mapping[str, Any], measured: frozenset,
                       has_tokenizer: bool, options: Mapping[str, Any]) -> list[str]:
    from_server = {k: v for k, v in preferred.items() if k not in params}
    unmeasured = {name: c for c in CONDITIONS if options.get(c.option) and c.name not in measured
                  for name in c.params}
    found = []
    for name, value in {**from_server, **params}.items():
        param = TABLE.get(("sampling_params", name))
        if param is None:
            found.append(f"{name}: not a sampling parameter of SGLang 0.5.17. Fix: drop it")
            continue
        if name == "sampling_seed":
            found += [p for p in [seed_problem(value)] if p]
            continue
        if _refused(param, measured):
            if not is_default(value, SAMPLING_DEFAULTS.get(name)):
                suffix = " (set by the server's --preferred-sampling-params)" if name in from_server else ""
                found.append(param.refusal() + suffix)
            continue
        problem = _type_problem(param, value)
        if problem:
            found.append(problem + ". Fix: send a value of that type")
        elif name in NEEDS_TOKENIZER and not has_tokenizer and not is_default(value, SAMPLING_DEFAULTS.get(name)):
            found.append(f"{param.label()}: needs the server's tokenizer ({NEEDS_TOKENIZER[name]}), and this server "
                         "runs with --skip-tokenizer-init. Fix: drop it, or serve with the tokenizer")
        elif name in unmeasured and not is_default(value, SAMPLING_DEFAULTS.get(name)):
            found.append(unmeasured[name].refusal(param))
    return found


#: Served parameters SGLang reads the scheduler's tokenizer for: without it the scheduler would crash.
NEEDS_TOKENIZER = {"min_new_tokens": "SGLang's min_new_tokens penalizer reads the tokenizer's EOS ids"}


def _request_problems(request: Mapping[str, Any], prompt_len: int | None, measured: frozenset) -> list[str]:
    found = []
    for name, value in request.items():
        param = TABLE.get(("request", name))
        if param is None:  # a field this table does not know: not a numerics option of SGLang 0.5.17
            continue
        if _refused(param, measured):
            if not is_default(value, REQUEST_DEFAULTS.get(name)):
                found.append(param.refusal())
            continue
        problem = _type_problem(param, value)
        if problem:
            found.append(problem + ". Fix: send a value of that type")
    return found


def problems(request: Mapping[str, Any], sampling_params: Any, prompt_len: int | None = None,
             preferred: Mapping[str, Any] | None = None, measured: frozenset = frozenset(),
             has_tokenizer: bool = True, options: Mapping[str, Any] | None = None) -> list[str]:
    """What keeps one request (a single, normalized ``GenerateReqInput``'s fields and its sampling
    parameters) from being served under ``--corun``; ``prompt_len``: its prompt's token count;
    ``preferred``: the server's ``--preferred-sampling-params``, which SGLang merges under them;
    ``measured``: the refused parameters and conditions a GPU queue chunk measures on this server
    (``measured_names``); ``has_tokenizer``: whether the server loaded its tokenizer (not
    ``--skip-tokenizer-init``); ``options``: the server's values of the options ``CONDITIONS`` name."""
    if sampling_params is None:
        sampling_params = {}
    if not isinstance(sampling_params, Mapping):
        return [f"sampling_params: {_shown(sampling_params)} is not an object. Fix: send a JSON object"]
    return (_sampling_problems(sampling_params, preferred or {}, measured, has_tokenizer, options or {})
            + _request_problems(request, prompt_len, measured))


def check(request: Mapping[str, Any], sampling_params: Any, prompt_len: int | None = None,
          preferred: Mapping[str, Any] | None = None, measured: frozenset = frozenset(),
          has_tokenizer: bool = True, options: Mapping[str, Any] | None = None) -> None:
    """``problems()``, raised as one ``RequestRefused`` when there are any."""
    found = problems(request, sampling_params, prompt_len, preferred, measured, has_tokenizer, options)
    if found:
        raise RequestRefused(found)


#: SGLang 0.5.17's defaults of the refused parameters and of those ``NEEDS_TOKENIZER`` names (its
#: ``SamplingParams`` and ``GenerateReqInput``).
SAMPLING_DEFAULTS: dict[str, Any] = {
    "min_new_tokens": 0, "custom_params": None, "stop_strs": None, "stop_regex_strs": None, "stop_str_max_len": 0,
    "stop_regex_max_len": 0, "is_normalized": False,
}
REQUEST_DEFAULTS: dict[str, Any] = {"routed_experts_start_len": 0}


# ----------------------------------------------------------------- docs/requests.md


#: The conditions' table's one row when there is no condition.
NO_CONDITION = "| (none) | | | | |"


def conditions_table() -> str:
    """The table of ``CONDITIONS`` as ``docs/requests.md`` shows it (``NO_CONDITION`` its one row when empty)."""
    rows = ["| server option | refuses | why | fix | measured by |", "| --- | --- | --- | --- | --- |"]
    for c in CONDITIONS:
        rows.append(f"| `{c.flag()}` | {', '.join(f'`{n}`' for n in c.params)} | {c.note} | {c.fix} | "
                    f"`{MEASURE_OPTION} {c.name}` ({c.measure}) |")
    return "\n".join(rows if CONDITIONS else rows + [NO_CONDITION]) + "\n"


def markdown_table() -> str:
    """The table of ``PARAMETERS`` as ``docs/requests.md`` shows it."""
    order = {VERIFIED: 0, FREE: 1, REFUSED: 2}
    rows = ["| parameter | in | OpenAI | under --corun | evidence, reason, or why refused | fix |",
            "| --- | --- | --- | --- | --- | --- |"]
    for p in sorted(PARAMETERS, key=lambda p: (order[p.status], p.where != "sampling_params")):
        rows.append(f"| `{p.name}` | {p.where} | {p.openai or ''} | {p.status} | {p.note} | {p.fix} |")
    return "\n".join(rows) + "\n"


def _replace_table(text: str, table: str) -> str:
    """``text`` with its table whose header line is ``table``'s replaced by ``table``: the run of lines starting
    with ``|`` from that header on. ``ValueError`` unless exactly one line is that header."""
    header = table.splitlines()[0]
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == header]
    if len(starts) != 1:
        raise ValueError(f"{len(starts)} lines are the header {header!r}; expected one")
    end = starts[0]
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[:starts[0]]) + table + "".join(lines[end:])


def write_tables(path: str) -> bool:
    """Rewrites, in the file at ``path`` (``docs/requests.md``), the tables ``markdown_table()`` and
    ``conditions_table()`` generate, in place; the rest of the file is kept byte for byte. Returns whether the
    file changed."""
    from pathlib import Path

    file = Path(path)
    text = file.read_text()
    new = _replace_table(_replace_table(text, markdown_table()), conditions_table())
    if new != text:
        file.write_text(new)
    return new != text


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 2:
        sys.exit("usage: python -m corun_sglang.core.requests_check docs/requests.md")
    for name in sys.argv[1:]:
        print(f"{name}: {'rewritten' if write_tables(name) else 'up to date'}")
