"""``verify_packing``: the probe verifies a pack only where every packed needle keeps its bits alone."""

import random

import pytest

from corun_sglang.probes import harness, verify_packing
from corun_sglang.core.compare import Generation

PACK, LEAST = 1024, 17


def pack_server(bits, batch=True):
    """A sender standing for a packing server: a prompt's generation is ``bits(prompt, prompts of the
    call, place in the call)``; ``batch`` False logs each prompt as a prefill of its own."""
    calls = []

    def send(prompts, needle):
        calls.append([len(p) for p in prompts])
        out = Generation.of([7] * 4, [bits(prompts[needle], prompts, needle)] * 4)
        tokens = [len(p) for p in prompts]
        return out, [(len(prompts), sum(tokens))] if batch else [(1, n) for n in tokens]

    return send, calls


def test_needles_span_the_packable_lengths_and_packings_fill_the_pack():
    lengths = verify_packing.needle_lengths(PACK, LEAST, 4)
    assert lengths[0] == LEAST and lengths[-1] == PACK - LEAST and len(lengths) == 4
    rnd = random.Random(0)
    for n in lengths:
        plans = verify_packing.packings(n, PACK, LEAST, rnd)
        assert {name for name, _ in plans} == {"short-first", "short-last", "long-last", "random-middle"}
        for name, plan in plans:
            others = [m for m in plan if m != -1]
            assert plan.count(-1) == 1 and others, name
            assert all(LEAST <= m for m in others) and n + sum(others) <= PACK, name
    assert verify_packing.packings(PACK - LEAST + 1, PACK, LEAST, rnd) == []  # no room for a co-runner


def test_a_pack_blind_to_its_co_runners_verifies():
    send, calls = pack_server(lambda p, prompts, i: -0.5 - p[0] / 1e6)
    found = verify_packing.probe(send, PACK, LEAST, vocab=1000)
    assert verify_packing.failures(found) == []
    assert all(len(got["counted"]) == 4 for got in found.values())
    assert calls[0] == [LEAST]  # each needle alone first


@pytest.mark.parametrize("bits,says", [
    (lambda p, prompts, i: -0.5 - (len(prompts) > 1) * 2.0 ** -20, "first differs from it alone at position 0"),
    (lambda p, prompts, i: -0.5 - (i > 0) * 2.0 ** -20, "packed short-last first differs"),
])
def test_a_pack_whose_bits_follow_co_runners_or_place_does_not_verify(bits, says):
    send, _ = pack_server(bits)
    problems = verify_packing.failures(verify_packing.probe(send, PACK, LEAST, vocab=1000))
    assert problems and any(says in p for p in problems)


def test_the_probe_reports_each_needle_and_packing_as_it_is_checked():
    send, calls = pack_server(lambda p, prompts, i: -0.5 - (len(prompts) > 1 and i == 0) * 2.0 ** -20)
    lines = []
    verify_packing.probe(send, PACK, LEAST, vocab=1000, needles=2,
                         progress=lambda line: lines.append((line, len(calls))))
    first, last = verify_packing.needle_lengths(PACK, LEAST, 2)
    assert [line for line, _ in lines if "alone" in line] == [f"needle 1/2: {first} tokens, alone",
                                                              f"needle 2/2: {last} tokens, alone"]
    packed = [(line, sent) for line, sent in lines if "packed" in line]
    assert len(packed) == 8 and [sent for _, sent in packed] == [2, 3, 4, 5, 7, 8, 9, 10]  # each as it returns
    assert packed[0][0].startswith("needle 1: packed short-first (") and packed[0][0].endswith(
        "prompts): differs at position 0")
    assert packed[1][0].startswith("needle 1: packed short-last (") and packed[1][0].endswith("): identical")


def test_a_server_that_never_packs_reports_each_packing_as_not_counted():
    send, _ = pack_server(lambda p, prompts, i: -0.5, batch=False)
    lines = []
    verify_packing.probe(send, PACK, LEAST, vocab=1000, needles=1, progress=lines.append)
    assert len(lines) == 5 and all(line.endswith("not one prefill batch, not counted") for line in lines[1:])


def test_a_server_that_never_packs_verifies_nothing():
    send, _ = pack_server(lambda p, prompts, i: -0.5, batch=False)
    problems = verify_packing.failures(verify_packing.probe(send, PACK, LEAST, vocab=1000))
    assert len(problems) == 4 and all("never ran packed" in p for p in problems)


def test_the_sender_reads_prompt_and_new_token_logprobs_and_the_logged_batches(tmp_path, monkeypatch, json_server):
    monkeypatch.setattr(harness.time, "sleep", lambda s: None)
    log = tmp_path / "server.log"
    log.write_text("")

    def answer(path, body):
        """One prefill batch of the call's prompts logged; logprobs for those that asked."""
        prompts = body["input_ids"]
        with open(log, "a") as f:
            f.write(f"Prefill batch, #new-seq: {len(prompts)}, #new-token: {sum(map(len, prompts))}, \n")
        steps = body["sampling_params"]["max_new_tokens"]
        return 200, [{"meta_info": {"input_token_logprobs": [[None, p[0], None]] + [[-1.5, t, None] for t in p[1:]],
                                    "output_token_logprobs": [[-0.25, 7, None]] * steps} if asked else {}}
                     for p, asked in zip(prompts, body["return_logprob"])]

    server = json_server(answer)
    needle, batches = verify_packing.sender(server.url, log)([[104, 105], [101, 102, 103]], 1)
    assert batches == [(2, 5)]
    assert needle == Generation.of([102, 103, 7, 7, 7, 7], [-1.5, -1.5, -0.25, -0.25, -0.25, -0.25])
    # only the needle asks for logprobs, of every prompt position
    assert server.posts[-1][1]["return_logprob"] == [False, True]
    assert server.posts[-1][1]["logprob_start_len"] == [-1, 0]


def test_model_heads_read_the_config(tiny_model):
    assert verify_packing.model_heads(tiny_model) == (4, 2)


GRAPHS = [16, 32, 48, 64]  # a server capturing tier candidates 16, 32 and 48 below N = 64


def graph_server(decode_differs_in=(), prefill_differs_when=lambda prompts, i: False):
    """A sender standing for a packing server with decode graphs ``GRAPHS``: a needle's generation is its
    prompt logprobs and first new token (what its prefill computes: changed by 2**-20 where
    ``prefill_differs_when(prompts, place)``), then 3 decode steps whose bits change in the graphs
    ``decode_differs_in`` (the smallest that holds every prompt of the call)."""
    def send(prompts, needle):
        length, graph = len(prompts[needle]), verify_packing.graph_of(len(prompts), GRAPHS)
        prefill = -0.5 - prefill_differs_when(prompts, needle) * 2.0 ** -20
        decode = -0.25 - (graph in decode_differs_in) * 2.0 ** -20
        out = Generation.of([7] * (length + 3), [prefill] * length + [decode] * 3)
        return out, [(len(prompts), sum(len(p) for p in prompts))]

    return send


def test_a_packing_decoded_in_another_graph_than_the_needle_alone_is_judged_on_its_prefill():
    """The needle alone decodes in the 16-slot graph, a packing of 33 to 64 prompts in the 64-slot one: where
    the 16-slot graph has other bits (a tier candidate the tiers probe rejects), those packings still verify
    the pack on what their prefill computed, and the packings of up to 16 prompts compare whole."""
    send = graph_server(decode_differs_in={16})
    lines = []
    found = verify_packing.probe(send, PACK, LEAST, vocab=1000, graphs=GRAPHS, progress=lines.append)
    assert verify_packing.failures(found) == []
    assert all("long-last" in got["whole"] and "short-first" not in got["whole"] for n, got in found.items()
               if n < PACK // 2)
    assert any("(its prefill: decoded in the 64-slot graph, alone in the 16)" in line for line in lines)
    # the control: the same server judged as if it had one decode graph fails on those decode steps
    control = verify_packing.failures(verify_packing.probe(send, PACK, LEAST, vocab=1000))
    assert control and all("packed short-" in p and "first differs" in p for p in control)


def test_a_prefill_that_follows_its_co_runners_fails_also_where_only_the_prefill_is_compared():
    send = graph_server(decode_differs_in={16}, prefill_differs_when=lambda prompts, i: len(prompts) > 32)
    problems = verify_packing.failures(verify_packing.probe(send, PACK, LEAST, vocab=1000, graphs=GRAPHS))
    assert problems and all("packed short-" in p for p in problems)


def test_a_needle_never_decoded_packed_in_its_alone_graph_does_not_verify():
    send = graph_server()
    found = verify_packing.probe(send, PACK, LEAST, vocab=1000, graphs=[1, 64])  # alone: 1; any packing: 64
    problems = verify_packing.failures(found)
    assert problems and all("never ran packed with its decode steps in the graph of it alone" in p for p in problems)


def test_the_decode_graphs_are_read_from_the_line_a_corun_server_logs(make_args):
    cfg = make_args(corun=True, max_running_requests=64, corun_decode_tier_candidates="16,32,48",
                    corun_prefill_pack_candidate=1024).corun_config
    assert verify_packing.decode_graphs("[2026-12-05 21:24:48] " + cfg.summary() + "\n") == [16, 32, 48, 64]
    assert verify_packing.decode_graphs("no such line") is None
