"""``demo``: its requests, the comparison and report, and the harness against a local chat server.

Two local servers stand in for SGLang's chat endpoint: one whose answers depend on the request alone
(every prompt identical) and one whose logprobs shift with the requests in flight, as batch-dependent
kernels do (every prompt differs at step 0, in the logprob bits only).
"""

import json
import threading
import time

import pytest

from corun_sglang.commands import cli, demo
from corun_sglang.probes import harness


def test_cases_are_greedy_and_seeded_above_zero_and_default_sglang_gets_them_greedy():
    assert {c.temperature == 0 for c in demo.CASES} == {True, False}
    assert all(c.temperature == 0 for c in demo.greedy(demo.CASES))
    assert [c.prompt for c in demo.greedy(demo.CASES)] == [c.prompt for c in demo.CASES]


def test_corunners_are_reproducible_chat_requests_of_varied_lengths():
    bodies = demo.corunners(255, 48, seed=3)
    assert bodies == demo.corunners(255, 48, seed=3) and bodies != demo.corunners(255, 48, seed=4)
    assert len(bodies) == 255 and all(b["logprobs"] and b["model"] == demo.MODEL for b in bodies)
    words = [len(b["messages"][0]["content"].split()) for b in bodies]
    assert min(words) < 20 and max(words) > 300 and len(set(words)) > 100
    assert {b["max_tokens"] for b in bodies} <= set(range(24, 97)) and len({b["seed"] for b in bodies}) == 255


def _reply(tokens, logprobs, text="answer"):
    return {"choices": [{"message": {"content": text},
                         "logprobs": {"content": [{"token": t, "logprob": x} for t, x in zip(tokens, logprobs)]}}]}


CASE = demo.Case("What is the capital of France?", 0.0, 0)


def test_a_case_keeps_its_result_only_with_the_same_tokens_and_logprob_bits():
    alone = demo.answer(_reply(["Paris", "."], [-0.0, -0.5]))
    same = demo.compare_case(CASE, alone, demo.answer(_reply(["Paris", "."], [-0.0, -0.5])))
    assert (same.tokens_identical, same.logprob_bits_identical, same.first_divergence, same.identical) == (
        True, True, None, True)
    signed = demo.compare_case(CASE, alone, demo.answer(_reply(["Paris", "."], [0.0, -0.5])))  # -0.0 == 0.0
    assert (signed.tokens_identical, signed.logprob_bits_identical, signed.first_divergence) == (True, False, 0)
    other = demo.compare_case(CASE, alone, demo.answer(_reply(["Paris", "!"], [-0.0, -0.5])))
    assert (other.tokens_identical, other.logprob_bits_identical, other.first_divergence) == (False, True, 1)
    with pytest.raises(RuntimeError, match="no logprobs"):
        demo.answer({"choices": [{"message": {"content": "x"}, "logprobs": None}]})


def _row(step, sampling="greedy"):
    return demo.Row(prompt=CASE.prompt, sampling=sampling, text_alone="Paris.", text_among="Paris!", steps=2,
                    tokens_identical=step != 1, logprob_bits_identical=step is None, first_divergence=step)


def test_the_report_sets_the_servers_side_by_side():
    arms = {demo.CORUN: [_row(None), _row(None, "T 0.8, seed 7")], demo.DEFAULT: [_row(None), _row(1)]}
    text = demo.render(arms, 256)
    lines = text.splitlines()
    assert lines[0] == "each prompt alone, then among 255 concurrent co-runners"
    assert lines[1].split("|")[1].strip() == "--corun" and lines[1].split("|")[2].strip() == "default SGLang"
    assert lines[2].split("| ")[1].split() == ["sampling", "tokens", "bits", "step"]
    row = lines[5]
    assert row.startswith("What is the capital of France?") and row.count("| ") == 2
    assert row.split("| ")[1].split() == ["T", "0.8,", "seed", "7", "same", "same", "-"]
    assert row.split("| ")[2].split() == ["greedy", "DIFFER", "DIFFER", "1"]
    assert "  default SGLang, among others:  'Paris!'" in text and "--corun, among others" not in text
    assert lines[-2:] == ["--corun: 2 of 2 prompts identical, bit for bit, among 255 co-runners",
                          "default SGLang: 1 of 2 prompts identical, bit for bit, among 255 co-runners"]
    record = demo.to_json(arms, {"concurrency": 256}, {demo.CORUN: ["python", "-m", "sglang.launch_server"]})
    assert json.loads(json.dumps(record))["arms"]["default"]["identical"] == 1
    assert record["arms"]["default"]["rows"][1]["first_divergence"] == 1


def _chat(batch_dependent: bool):
    """A chat endpoint's answer (for ``json_server``) whose logprobs, when ``batch_dependent``, move by 2**-30
    for a request that overlapped another: one that arrived while another was in flight, or saw one arrive.
    Each request waits (at most 1 s) for such a peer, so a request sent among others overlaps them however
    slowly the threads start. Its state: the bodies and the most requests in flight at once."""
    state = {"in_flight": set(), "most": 0, "bodies": [], "overlapped": set()}
    changed = threading.Condition()

    def answer(path, body):
        me = object()
        with changed:
            if state["in_flight"]:
                state["overlapped"] |= state["in_flight"] | {me}
            state["in_flight"].add(me)
            state["most"] = max(state["most"], len(state["in_flight"]))
            state["bodies"].append(body)
            changed.notify_all()
            changed.wait_for(lambda: me in state["overlapped"], timeout=1.0)
        time.sleep(0.05)  # requests sent at once overlap, as in a batch
        prompt = body["messages"][0]["content"]
        tokens = [f"w{(len(prompt) + body['seed'] + i) % 97}" for i in range(body["max_tokens"])]
        with changed:
            state["in_flight"].discard(me)
            overlapped = me in state["overlapped"]
        shift = 2.0 ** -30 if batch_dependent and overlapped else 0.0
        return 200, _reply(tokens, [-0.25 - i / 8 + shift for i in range(len(tokens))], " ".join(tokens))

    return answer, state


@pytest.mark.parametrize("batch_dependent", [False, True])
def test_the_harness_sends_each_prompt_alone_then_among_co_runners(batch_dependent, json_server):
    answer, state = _chat(batch_dependent)
    server = json_server(answer)
    lines = []
    rows = demo.run_arm(harness.http_sender(server.url, harness.CHAT), demo.CASES[:2], concurrency=12, max_tokens=6,
                        progress=lines.append)
    assert [path for path, _ in server.posts] == [harness.CHAT] * (2 + 2 * 12)
    assert len(state["bodies"]) == 2 + 2 * 12 and state["most"] >= 2  # the co-runners ran at once
    assert lines == ["prompt 1/2 alone", "prompt 2/2 alone", "prompt 1/2 among 11 co-runners",
                     "prompt 2/2 among 11 co-runners"]
    if batch_dependent:
        assert [(r.tokens_identical, r.logprob_bits_identical, r.first_divergence) for r in rows] == [
            (True, False, 0)] * 2
    else:
        assert all(r.identical and r.steps == 6 for r in rows)


def test_the_command_refuses_a_demo_without_co_runners(capsys):
    assert cli.main(["demo", "--concurrency", "1"]) == 2
    assert "at least one co-runner" in capsys.readouterr().err


def test_the_command_runs_both_servers_and_writes_the_results(tmp_path, monkeypatch, capsys):
    served = []

    def serve_and_run(model, arm, cases, concurrency, max_tokens, log, static_gb, progress):
        served.append((arm, [c.temperature for c in cases], concurrency, log.name))
        progress(f"{arm}: ran")
        return [_row(None if arm == demo.CORUN else 3) for _ in cases], ["sglang", arm]

    monkeypatch.setattr(demo, "serve_and_run", serve_and_run)
    out = tmp_path / "demo.json"
    code = cli.main(["demo", "--model-path", str(tmp_path), "--concurrency", "64", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert [(arm, n, log) for arm, _, n, log in served] == [(demo.CORUN, 64, "demo.corun.log"),
                                                           (demo.DEFAULT, 64, "demo.default.log")]
    assert all(t == 0 for t in served[1][1]) and any(t > 0 for t in served[0][1])
    assert "corun-sglang demo [" in captured.err and "--corun: 4 of 4 prompts identical" in captured.out
    record = json.loads(out.read_text())
    assert record["arms"]["corun"]["identical"] == 4 and record["arms"]["default"]["identical"] == 0
    assert record["settings"]["concurrency"] == 64
