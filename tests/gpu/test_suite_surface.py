"""Determinism suite, scenarios n-r and t (s, the prefix cache, is ``test_suite``'s): the OpenAI surface eval and RL
clients use, each a per-request transform of its own logits row, alone vs among co-runners that use the same
feature with other values and co-runners that do not.

- n: top-k logprobs (values and the order of ties: a regex needle's masked vocabulary ties at one clamped value),
  prompt top-k logprobs and ``token_ids_logprob``. Stock SGLang 0.5.17 dies on a batch that mixes
  ``token_ids_logprob`` with requests without it (sglang#35705), so its arms are sent none;
- o: frequency, presence and repetition penalties, fed while co-runners arrive (each arrival a prefill between
  two decode steps: what made SGLang's penalty state skip a token);
- p: ``min_new_tokens`` and ``logit_bias`` (EOS boosted but held back; tokens banned);
- q: grammars through xgrammar: a JSON schema, a regex, an EBNF grammar;
- r: the official ``openai`` client on ``/v1/completions`` (``logprobs: 5`` with ``echo``) and
  ``/v1/chat/completions`` (``top_logprobs``, ``response_format`` with a JSON schema, ``tools`` with a forced
  ``tool_choice``);
- t: grammars through SGLang's reasoning wrapper, on servers started with ``--reasoning-parser qwen3``: needles
  with ``require_reasoning`` think unmasked until their own tokens complete the think-end sequence (boosted by
  ``logit_bias``), then follow a JSON schema, a regex, an EBNF grammar or a structural tag (a tool call, ``<tool>``
  and a JSON object); another needle's grammar applies from its first token through the wrapper; among co-runners
  with grammars behind reasoning, grammars alone and none.

Each scenario reuses ``test_suite``'s arms, evidence and verdicts (the default arm, decoding greedily, must
diverge); each also proves the feature acted (``_applied``): a penalized, biased or constrained needle differs
from its plain twin, a banned token never appears, a grammar's output parses (cut by its length: is a prefix
the grammar accepts; under reasoning, the text after the switch). Servers serve text (``CORUN_SUITE_TEXT=1``); the
chunks of n-r add ``--tool-call-parser qwen25`` (a forced tool call then becomes a structural tag), t's chunk
``--reasoning-parser qwen3``, and a chunk names what it measures that ``--corun`` refuses elsewhere in
``--corun-measure`` (``CORUN_SUITE_CORUN_ARGS``; no chunk needs it while ``requests_check`` has nothing to measure).
"""

import dataclasses
import hashlib
import json
import random
import re
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from corun_sglang.core.compare import Generation, first_divergence
from corun_sglang.probes import generate
from corun_sglang.tools import evidence

import harness
from harness import Item
from test_suite import _across_arms, _alone_then_among, _fillers, arms, intended  # noqa: F401 (fixture)

pytestmark = pytest.mark.e2e

#: token ids whose logprobs ``token_ids_logprob`` needles ask for at every step (inside SmolLM2's vocabulary)
CHOSEN = [0, 1, 2, 13, 100, 1000, 5000]


def _with(item: Item, **fields) -> Item:
    """``item`` with request fields (``top_logprobs_num`` ...) set beside its sampling parameters."""
    return dataclasses.replace(item, body={**item.body, **fields})


def _sampling(item: Item, **params) -> Item:
    return dataclasses.replace(item, body={**item.body, "sampling_params": {**item.body["sampling_params"], **params}})


def _mixed(items: list[Item], kinds: list[dict], seed: int) -> list[Item]:
    """Co-runners, each given one of ``kinds`` (``{}``: the feature unused): ``{"request": {...}, **params}``."""
    rnd = random.Random(seed)
    out = []
    for item in items:
        kind = dict(rnd.choice(kinds))
        out.append(_sampling(_with(item, **kind.pop("request", {})), **kind))
    return out


def _needle(arms, key, prompt_seed, new_tokens, temperature, seed, low=100, high=400, **params) -> Item:
    (prompt,) = arms.prompts(1, low, high, prompt_seed)
    return Item(key, "", "compared", harness.request(prompt, new_tokens, temperature, seed, **params))


def _without(items: list[Item], field: str) -> list[Item]:
    """``items`` without the request field ``field``."""
    return [dataclasses.replace(i, body={k: v for k, v in i.body.items() if k != field}) for i in items]


def _twins(needles: list[Item], drop: tuple[str, ...]) -> list[Item]:
    """The needles without the parameters ``drop`` names: what they would give without the feature."""
    out = []
    for n in needles:
        params = {k: v for k, v in n.body["sampling_params"].items() if k not in drop}
        body = {k: v for k, v in n.body.items() if k not in drop}
        out.append(dataclasses.replace(n, run="twin", role="corunner", body={**body, "sampling_params": params}))
    return out


def _differs_from_twin(sents) -> list[str]:
    """Each needle's reference must differ from its twin's output: the feature acted."""
    refs = {s.key: s.generation for s in sents if s.role == "reference"}
    twins = {s.key: s.generation for s in sents if s.run == "twin"}
    return [f"{key}: its output equals its twin's without the feature (the feature did not act)"
            for key, ref in refs.items() if key in twins and first_divergence(ref, twins[key]) is None]


def _eos(arms) -> int:
    config = json.loads((arms.checkpoint / "config.json").read_text())
    eos = config["eos_token_id"]
    return eos[0] if isinstance(eos, list) else eos


# ------------------------------------------------------------------ n: top-k logprobs

TOPK_KINDS = [{}, {}, {"request": {"top_logprobs_num": 1}}, {"request": {"top_logprobs_num": 3}},
              {"request": {"top_logprobs_num": 10}}, {"request": {"top_logprobs_num": 64}},
              {"request": {"token_ids_logprob": CHOSEN[:3]}},
              # a grammar may end a co-runner early (its matcher accepts EOS): ignore_eos off, so it ends whole
              {"request": {"top_logprobs_num": 20}, "regex": "[a-z ]{8,}", "ignore_eos": False}]


def _tied_steps(sents) -> int:
    """Reference steps whose top-k list holds two values of the same bits: ties the comparison really ordered
    (masked tokens tie at -inf, which SGLang's reply carries as null and reads as NaN)."""
    return sum(1 for s in sents if s.role == "reference" and s.generation is not None
               for step in s.generation.top_logprobs + s.generation.prompt_top_logprobs
               if len({struct.pack("<d", v) for v, _ in step}) < len(step))


def _no_token_allowed(sents) -> list[str]:
    """References with a sampled token whose logprob is not finite: a grammar row that allowed no token (every
    logit -inf), where the output is whatever the kernels make of that row, not a sample the grammar allowed."""
    return [f"{s.key}: {bad} sampled-token logprobs are not finite (a grammar row allowed no token)"
            for s in sents if s.role == "reference" and s.generation is not None
            and (bad := s.generation.nonfinite_logprobs)]


def test_n_top_k_logprobs_among_co_runners_asking_other_k(arms):
    needles = [
        _with(_needle(arms, "needle0", 150, 64, 0.8, 151, prompt_logprobs=True), top_logprobs_num=5),
        _with(_needle(arms, "needle1", 152, 64, 0.0, 153), top_logprobs_num=20),
        _with(_needle(arms, "needle2", 154, 64, 0.7, 155), top_logprobs_num=1, token_ids_logprob=CHOSEN),
        # a handful of tokens allowed ("yes", " no", "y" ...), so a top 20 holds masked tokens tied at -inf at
        # every step; 32 tokens never complete the regex
        _with(_needle(arms, "needle3", 156, 32, 0.9, 157, regex="(yes|no)( (yes|no)){63}"), top_logprobs_num=20),
    ]
    crowds = {f"with{n}": _mixed(_fillers(arms, n, 158 + n, 96), TOPK_KINDS, 158 + n) for n in (63, 255)}

    def ties_exercised(arm, sents, row):
        row["tied_steps"] = _tied_steps(sents)
        untied = [] if row["tied_steps"] else [
            "no reference step held tied top-k values: the order of ties went untested"]
        return untied + _no_token_allowed(sents)

    stock = _alone_then_among(_without(needles, "token_ids_logprob"),
                              {run: _without(others, "token_ids_logprob") for run, others in crowds.items()})
    corun = _alone_then_among(needles, crowds)
    _across_arms(arms, "n", lambda lane: (corun if lane.arm.startswith("corun") else stock)(lane),
                 check=ties_exercised)


# ------------------------------------------------------------------ o: penalties

PENALTY_KINDS = [{}, {}, {"frequency_penalty": 0.3}, {"presence_penalty": 1.0}, {"repetition_penalty": 1.1},
                 {"frequency_penalty": -0.5, "repetition_penalty": 0.9}, {"presence_penalty": 0.2, "min_new_tokens": 4}]
PENALTIES = ("frequency_penalty", "presence_penalty", "repetition_penalty")


def test_o_penalties_among_arriving_co_runners(arms):
    needles = [
        _needle(arms, "needle0", 160, 96, 0.8, 161, frequency_penalty=0.7),
        _needle(arms, "needle1", 162, 96, 0.0, 163, presence_penalty=0.6),
        _needle(arms, "needle2", 164, 96, 0.7, 165, repetition_penalty=1.3),
        _needle(arms, "needle3", 166, 96, 1.0, 167, frequency_penalty=0.4, presence_penalty=0.4,
                repetition_penalty=1.2),
    ]
    crowds = {f"with{n}": _mixed(_fillers(arms, n, 168 + n, 128), PENALTY_KINDS, 168 + n) for n in (15, 100, 255)}
    along = _alone_then_among(needles, crowds)

    def plan(lane):
        return lane.alone(_twins(needles, PENALTIES)) + along(lane)

    _across_arms(arms, "o", plan, check=lambda arm, sents, row: _differs_from_twin(sents))


# ------------------------------------------------------------------ p: min_new_tokens and logit_bias

def test_p_min_new_tokens_and_logit_bias_among_co_runners(arms):
    eos = str(_eos(arms))
    probes = [_needle(arms, f"needle{i}", 170 + i, 64, t, 175 + i) for i, t in enumerate((0.8, 0.0, 0.7, 0.0))]

    def plan(lane):
        # the needles' twins, without bias or minimum: each one's first token is banned in its needle
        twins = lane.alone([dataclasses.replace(p, run="twin", role="corunner") for p in probes])
        banned = [s.generation.tokens[0] for s in twins]
        needles = [
            _sampling(probes[0], ignore_eos=False, min_new_tokens=8, logit_bias={eos: 12.0}),
            _sampling(probes[1], ignore_eos=False, min_new_tokens=24, logit_bias={eos: 8.0}),
            _sampling(probes[2], logit_bias={str(banned[2]): -100.0, str(banned[0]): 5.0}),
            _sampling(probes[3], logit_bias={str(banned[3]): -100.0}),
        ]
        # a co-runner's min_new_tokens stays within its max_new_tokens (8 or more), else SGLang refuses it
        kinds = [{}, {}, {"min_new_tokens": 6}, {"logit_bias": {eos: 4.0}, "min_new_tokens": 8, "ignore_eos": False},
                 {"logit_bias": {str(banned[1]): -100.0}}, {"logit_bias": {"13": 3.0, "100": -3.0}}]
        crowds = {f"with{n}": _mixed(_fillers(arms, n, 180 + n, 96), kinds, 180 + n) for n in (31, 200)}
        return twins + _alone_then_among(needles, crowds)(lane)

    def applied(arm, sents, row):
        refs = {s.key: s for s in sents if s.role == "reference"}
        found = [s for s in sents if s.run == "twin"]
        problems = []
        for key, least in (("needle0", 8), ("needle1", 24)):
            gen = refs[key].generation
            if gen is None or len(gen.tokens) < least:
                problems.append(f"{key}: {0 if gen is None else len(gen.tokens)} tokens, fewer than min_new_tokens "
                                f"{least}")
        for key, probe in (("needle2", found[2]), ("needle3", found[3])):
            gen = refs[key].generation
            if gen is not None and probe.generation.tokens[0] in gen.tokens:
                problems.append(f"{key}: the token banned by logit_bias -100 appears in its output")
        row["ended_early"] = sum(1 for k in ("needle0", "needle1") if refs[k].generation is not None
                                 and refs[k].generation.finish == "stop")
        return problems + _differs_from_twin(sents)

    _across_arms(arms, "p", plan, check=applied)


# ------------------------------------------------------------------ q: grammars

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"], "properties": {
    "name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 8}}}}
COLORS = r"(red|green|blue)( (red|green|blue)){3,12}\."
TUPLE_EBNF = 'root ::= "(" num "," num "," num ("," num)? ")"\nnum ::= [1-9] [0-9]?'
TUPLE = re.compile(r"\([1-9][0-9]?(,[1-9][0-9]?){2,3}\)")
#: a structural tag in SGLang's format form: a tool call, ``<tool>`` then a ``PERSON`` object then ``</tool>``
TOOL_TAG = json.dumps({"type": "structural_tag", "format": {
    "type": "tag", "begin": "<tool>", "content": {"type": "json_schema", "json_schema": PERSON}, "end": "</tool>"}})
#: co-runners' grammars end them when complete (the matcher accepts EOS), so they run without ignore_eos
GRAMMAR_KINDS = [{}, {}] + [{**g, "ignore_eos": False} for g in (
    {"regex": "[a-z]{5,20}"}, {"ebnf": 'root ::= "yes" | "no"'},
    {"json_schema": json.dumps({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})},
    {"json_schema": json.dumps(PERSON)})]


def _person(text):
    value = json.loads(text)
    return set(value) == {"name", "age", "tags"} and isinstance(value["age"], int)


def _tool(text):
    call = re.fullmatch(r"<tool>(.*)</tool>", text, re.S)
    return call is not None and _person(call.group(1))


def _grammar_prefix(tokenizer):
    """``accepts(key, text)``: whether ``text`` is a prefix the needle ``key``'s grammar accepts, by xgrammar's own
    matcher on the checkpoint's tokenizer (JSON whitespace free, as SGLang compiles a schema by default)."""
    import xgrammar as xgr

    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer))
    person = compiler.compile_json_schema(json.dumps(PERSON), any_whitespace=True)
    grammars = {"json": person, "json-greedy": person, "regex": compiler.compile_regex(COLORS),
                "ebnf": compiler.compile_grammar(TUPLE_EBNF), "tag": compiler.compile_structural_tag(TOOL_TAG)}
    return lambda key, text: xgr.GrammarMatcher(grammars[key]).accept_string(text)


def test_q_grammars_among_co_runners_with_other_grammars(arms):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(arms.checkpoint))
    accepts = _grammar_prefix(tokenizer)
    needles = [
        _needle(arms, "json", 190, 128, 0.7, 191, ignore_eos=False, json_schema=json.dumps(PERSON)),
        _needle(arms, "regex", 192, 128, 0.7, 193, ignore_eos=False, regex=COLORS),
        _needle(arms, "ebnf", 194, 128, 0.7, 195, ignore_eos=False, ebnf=TUPLE_EBNF),
        _needle(arms, "json-greedy", 196, 128, 0.0, 197, ignore_eos=False, json_schema=json.dumps(PERSON)),
    ]
    valid = {"json": _person, "json-greedy": _person, "regex": lambda t: re.fullmatch(COLORS, t) is not None,
             "ebnf": lambda t: TUPLE.fullmatch(t) is not None}
    crowds = {f"with{n}": _mixed(_fillers(arms, n, 198 + n, 96), GRAMMAR_KINDS, 198 + n) for n in (31, 127, 255)}

    def parses(arm, sents, row):
        """Each reference's text: a finished one satisfies its grammar; one cut at 128 tokens is a prefix its
        grammar accepts (a schema lets JSON whitespace run on, and a small model may take it)."""
        problems, cut = [], 0
        for s in sents:
            if s.role != "reference" or s.generation is None:
                continue
            text = tokenizer.decode(list(s.generation.tokens), skip_special_tokens=True,
                                    clean_up_tokenization_spaces=False)
            if s.generation.finish != "stop":
                cut += 1
                if not accepts(s.key, text):
                    problems.append(f"{s.key}: cut at 128 tokens, {text[:60]!r} is no prefix its grammar accepts")
                continue
            try:
                ok = valid[s.key](text)
            except ValueError:
                ok = False
            if not ok:
                problems.append(f"{s.key}: {text[:80]!r} does not satisfy its grammar")
        row["cut_references"] = cut
        return problems + _no_token_allowed(sents)

    _across_arms(arms, "q", _alone_then_among(needles, crowds), check=parses)


# ------------------------------------------------------------------ r: the official OpenAI client

TOOLS = [{"type": "function", "function": {"name": name, "description": f"the {what} in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"]}}}
         for name, what in (("get_weather", "weather"), ("get_time", "local time"))]
ANSWER = {"type": "object", "additionalProperties": False, "required": ["answer", "confidence"], "properties": {
    "answer": {"type": "string", "maxLength": 24}, "confidence": {"type": "integer", "minimum": 0, "maximum": 100}}}
QUESTIONS = ["What is the weather in Paris?", "What time is it in Tokyo?", "Is the sky blue?",
             "Name a prime number.", "What is the capital of Peru?", "Count to five."]
MAX_TOKENS = 64


def _tid(text: str) -> int:
    """A stable integer for a top-logprob entry's token text (the OpenAI API returns text, not ids)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "big")


def _chat(kind: str, question: str, seed: int, greedy: bool) -> dict:
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": MAX_TOKENS, "seed": seed,
            "temperature": 0.0 if greedy else 0.7, "logprobs": True, "top_logprobs": 5,
            "extra_body": {"return_token_ids": True}}
    if kind.startswith("tool"):
        name = TOOLS[0 if kind == "tool" else 1]["function"]["name"]
        body.update(tools=TOOLS, tool_choice={"type": "function", "function": {"name": name}})
    elif kind == "schema":
        body.update(response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}},
                    top_logprobs=3)
    elif kind == "top20":
        body.update(top_logprobs=20)
    return body


def _completion(question: str, seed: int, greedy: bool) -> dict:
    return {"prompt": question, "max_tokens": 32, "seed": seed, "temperature": 0.0 if greedy else 0.6,
            "logprobs": 5, "echo": True, "extra_body": {"return_token_ids": True}}


def _of_chat(choice) -> Generation:
    content = choice.logprobs.content
    return Generation.of(getattr(choice, "token_ids", None) or (), [c.logprob for c in content],
                         finish="length" if choice.finish_reason == "length" else "stop",
                         top_logprobs=[[(t.logprob, _tid(t.token)) for t in c.top_logprobs] for c in content])


def _of_completion(choice, prompt_tokens: int) -> Generation:
    lp = choice.logprobs
    top = [list((step or {}).items()) for step in lp.top_logprobs]
    cut = prompt_tokens
    return Generation.of(getattr(choice, "token_ids", None) or (), lp.token_logprobs[cut:],
                         prompt_logprobs=lp.token_logprobs[:cut],
                         finish="length" if choice.finish_reason == "length" else "stop",
                         top_logprobs=[[(v, _tid(t)) for t, v in step] for step in top[cut:]],
                         prompt_top_logprobs=[[(v, _tid(t)) for t, v in step] for step in top[:cut]])


def _openai_item(key, run, role, kind, question, seed):
    return {"key": key, "run": run, "role": role, "kind": kind, "question": question, "seed": seed}


def _send_openai(url: str, item: dict, greedy: bool, claim: int) -> evidence.Sent:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=900, max_retries=0)
    params = {"max_new_tokens": 32 if item["kind"] == "completion" else MAX_TOKENS, "ignore_eos": False}
    start, prompt = time.monotonic(), {}
    try:
        if item["kind"] == "completion":
            out = client.completions.create(model="default", **_completion(item["question"], item["seed"], greedy))
            generation = _of_completion(out.choices[0], out.usage.prompt_tokens)
            prompt = {"logprob_start_len": 0}  # echo: the prompt's logprobs are compared too
        else:
            out = client.chat.completions.create(model="default", **_chat(item["kind"], item["question"],
                                                                          item["seed"], greedy))
            generation = _of_chat(out.choices[0])
        prompt["prompt_tokens"] = out.usage.prompt_tokens
    except (openai.OpenAIError, httpx.HTTPError, AttributeError, TypeError):
        generation = None
    return evidence.Sent(item["key"], item["run"], item["role"], params, generation, start, time.monotonic(),
                         claim if item["role"] == "compared" else 0, **prompt)


NEEDLE_KINDS = [("tool", 0), ("tool2", 1), ("schema", 2), ("top20", 3), ("completion", 4)]
CROWD_KINDS = ["tool", "tool2", "schema", "top20", "plain", "completion"]


def test_r_openai_client_requests_alone_and_among_concurrent_clients(arms):
    needles = [_openai_item(f"{kind}", "", "compared", kind, QUESTIONS[q], 300 + q) for kind, q in NEEDLE_KINDS]

    def plan(lane):
        greedy = lane.arm == "default"
        out = [_send_openai(lane.url, {**n, "run": "alone", "role": "reference"}, greedy, 0) for n in needles]
        out += [_send_openai(lane.url, {**n, "run": "again", "role": "null"}, greedy, 0) for n in needles[:2]]
        for trial in range(2):
            rnd = random.Random(400 + trial)
            crowd = [_openai_item(f"client{i}", f"crowd{trial}", "corunner", rnd.choice(CROWD_KINDS),
                                  rnd.choice(QUESTIONS), 500 + 100 * trial + i) for i in range(48)]
            fillers = _fillers(arms, 64, 450 + trial, 96)
            batch = crowd + [{**n, "run": f"crowd{trial}"} for n in needles]
            rnd.shuffle(batch)
            claim = intended(len(batch) + len(fillers), lane.n)
            with ThreadPoolExecutor(len(batch) + 1) as pool:
                gen_fillers = pool.submit(lane.together, [dataclasses.replace(f, run=f"crowd{trial}") for f in fillers])
                out += list(pool.map(lambda it: _send_openai(lane.url, it, greedy, claim), batch))
                out += gen_fillers.result()
        return out

    _across_arms(arms, "r", plan)


# ------------------------------------------------------------------ t: grammars through the reasoning wrapper

#: the boost a thinking needle gives each token of the think-end sequence (``logit_bias``, added before the
#: temperature divides): e^4, about 55 times the odds. After its primer (``_thinking_prompt``) SmolLM2-135M closes
#: the tag at a step its own sampling picks, greedy too (on the CPU, from the same weights: after 4 to 15 tokens,
#: every needle). More is worse: at +6 the boosted ">" takes over and some needles never close the tag, and without
#: a primer no boost up to +8 does it ("</" is followed by ">", "think" staying near e^-13). Once the request has
#: switched, its grammar's mask, applied before the bias, keeps a boosted token out wherever the grammar disallows
#: it.
THINK_BIAS = 4.0


def _think_end(tokenizer) -> list[int]:
    """The think-end sequence SGLang's reasoning wrapper matches in a request's own output (``--reasoning-parser
    qwen3``: ``"</think>"`` as the checkpoint's tokenizer encodes it, possibly several tokens)."""
    return tokenizer.encode("</think>", add_special_tokens=False)


def _crossed_at(tokens, end: list[int]) -> int | None:
    """Where ``end`` first completes in ``tokens`` (the index after its last token), else None: where the
    reasoning wrapper switches a ``require_reasoning`` request to its grammar."""
    n = len(end)
    return next((i + n for i in range(len(tokens) - n + 1) if list(tokens[i:i + n]) == end), None)


def _thinking_prompt(arms, tokenizer, grammar: str, seed: int) -> list[int]:
    """A needle's prompt: random tokens, then three examples of ``<think>words</think>answer`` (answers of the
    needle's grammar) and an open ``<think>``, so that the model reasons a few words and closes the tag itself."""
    rnd = random.Random(seed)
    (noise,) = arms.prompts(1, 100, 400, seed)
    words = generate.WORDS

    def answer() -> str:
        if grammar in ("json", "tag"):
            person = json.dumps({"name": rnd.choice(words), "age": rnd.randint(1, 90),
                                 "tags": rnd.sample(words, rnd.randint(0, 3))})
            return person if grammar == "json" else f"<tool>{person}</tool>"
        if grammar == "regex":
            return " ".join(rnd.choice(("red", "green", "blue")) for _ in range(rnd.randint(4, 13))) + "."
        return "(" + ",".join(str(rnd.randint(1, 99)) for _ in range(rnd.randint(3, 4))) + ")"

    shots = "".join(f"<think>{' '.join(rnd.choice(words) for _ in range(rnd.randint(4, 12)))}</think>{answer()}\n"
                    for _ in range(3))
    return noise + tokenizer.encode(shots + "<think>", add_special_tokens=False)


def _reasoning_kinds(bias: dict) -> list[dict]:
    """Co-runners' kinds: q's grammars (applied from the first token through the wrapper), the same grammars
    behind the request's own reasoning (``require_reasoning``, the think-end boosted), reasoning without a grammar,
    and neither."""
    thinking = {"request": {"require_reasoning": True}, "logit_bias": bias}
    tool = {"structural_tag": TOOL_TAG, "ignore_eos": False}
    return GRAMMAR_KINDS + [{**g, **thinking} for g in [*GRAMMAR_KINDS[2:], tool]] + [thinking]


def test_t_grammars_through_the_reasoning_wrapper_among_co_runners(arms):
    """Run under ``--reasoning-parser qwen3``, where SGLang wraps each grammar in its reasoning wrapper: a
    ``require_reasoning`` request is unmasked until its own tokens complete the think-end sequence, then its
    grammar applies; any other gets its grammar from the first token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(arms.checkpoint))
    accepts = _grammar_prefix(tokenizer)
    end = _think_end(tokenizer)
    bias = {str(t): THINK_BIAS for t in end}
    person = json.dumps(PERSON)

    def needle(key, grammar, prompt_seed, temperature, seed, thinking, **params):
        prompt = (_thinking_prompt(arms, tokenizer, grammar, prompt_seed) if thinking
                  else arms.prompts(1, 100, 400, prompt_seed)[0])
        item = Item(key, "", "compared", harness.request(prompt, 128, temperature, seed, ignore_eos=False,
                                                         logit_bias=bias, **params))
        return _with(item, require_reasoning=thinking)

    needles = [
        needle("json-think", "json", 210, 0.7, 211, True, json_schema=person),
        needle("regex-think", "regex", 212, 0.7, 213, True, regex=COLORS),
        needle("ebnf", "ebnf", 214, 0.7, 215, False, ebnf=TUPLE_EBNF),  # the wrapper's grammar from token one
        needle("json-greedy-think", "json", 216, 0.0, 217, True, json_schema=person),
        needle("ebnf-think", "ebnf", 218, 1.0, 219, True, ebnf=TUPLE_EBNF),
        needle("tag-think", "tag", 224, 0.7, 225, True, structural_tag=TOOL_TAG),
    ]
    grammar = {"json-think": "json", "regex-think": "regex", "ebnf": "ebnf", "json-greedy-think": "json-greedy",
               "ebnf-think": "ebnf", "tag-think": "tag"}
    valid = {"json": _person, "json-greedy": _person, "regex": lambda t: re.fullmatch(COLORS, t) is not None,
             "ebnf": lambda t: TUPLE.fullmatch(t) is not None, "tag": _tool}
    kinds = _reasoning_kinds(bias)
    crowds = {f"with{n}": _mixed(_fillers(arms, n, 220 + n, 96), kinds, 220 + n) for n in (31, 127, 255)}
    thinking = {n.key for n in needles if n.body["require_reasoning"]}

    def parses(arm, sents, row):
        """Each reference's text after its switch (a ``require_reasoning`` one's think-end sequence, else its first
        token): a finished one satisfies its grammar; one cut at 128 tokens is a prefix its grammar accepts. A
        ``require_reasoning`` reference that never completed the sequence is counted (``still_thinking``); at least
        one must have crossed (``crossed``), else the switch went untested."""
        problems, cut, crossed, still = [], 0, 0, 0
        for s in sents:
            if s.role != "reference" or s.generation is None:
                continue
            tokens = list(s.generation.tokens)
            start = _crossed_at(tokens, end) if s.key in thinking else 0
            if start is None:
                still += 1
                continue
            crossed += s.key in thinking
            text = tokenizer.decode(tokens[start:], skip_special_tokens=True, clean_up_tokenization_spaces=False)
            if s.generation.finish != "stop":
                cut += 1
                if not accepts(grammar[s.key], text):
                    problems.append(f"{s.key}: cut at 128 tokens, {text[:60]!r} is no prefix its grammar accepts")
                continue
            try:
                ok = valid[grammar[s.key]](text)
            except ValueError:
                ok = False
            if not ok:
                problems.append(f"{s.key}: {text[:80]!r} does not satisfy its grammar")
        row.update(cut_references=cut, crossed=crossed, still_thinking=still)
        if not crossed:
            problems.append(f"no require_reasoning reference crossed into its grammar ({still} still thinking): "
                            "the reasoning wrapper's switch went untested")
        return problems + _no_token_allowed(sents)

    _across_arms(arms, "t", _alone_then_among(needles, crowds), check=parses)
