"""``verify_tiers``: the probe decides which decode graph sizes keep a request's bits."""

from bisect import bisect_left

from corun_sglang.probes import verify_tiers
from corun_sglang.core.compare import Generation

N = 64


def graph_server(captured, same):
    """A sender standing for a server with decode graphs ``captured``: a needle decoding among ``r``
    running requests replays the smallest captured size >= r; graphs in ``same`` give the N-slot
    graph's bits, the others differ from step 5 on."""
    sent = []

    def send(others, needle):
        running = len(others) + 1
        graph = captured[bisect_left(captured, running)]
        sent.append((len(others), graph))
        seed = needle["sampling_params"]["sampling_seed"]
        steps = needle["sampling_params"]["max_new_tokens"]
        logprobs = [-0.5 - seed / 1000 - i / 7 for i in range(steps)]
        if graph not in same:
            logprobs[5:] = [x + 2.0 ** -20 for x in logprobs[5:]]
        return Generation.of(list(range(steps)), logprobs)

    return send, sent


def test_probe_keeps_exactly_the_sizes_whose_graphs_match():
    candidates = [8, 16, 24, 48]
    send, sent = graph_server(candidates + [N], same={16, 48, N})
    bodies = verify_tiers.needles(2, 12, vocab=1000)
    found = verify_tiers.probe(send, N, candidates, bodies, vocab=1000)
    assert verify_tiers.verdict(found) == ([16, 48], {8: 5, 24: 5})
    # references ran among N - 1 co-runners (the N-slot graph), each candidate M among M - 1 (its own graph)
    assert sent[:2] == [(N - 1, N)] * 2
    assert sent[2:] == [(m - 1, m) for m in candidates for _ in range(2)]


def test_the_probe_reports_each_reference_and_each_size_as_it_is_checked():
    send, sent = graph_server([8, 16, N], same={16, N})
    lines = []

    def progress(line):
        lines.append((line, len(sent)))  # with the requests sent so far: each line comes as its step does

    verify_tiers.probe(send, N, [16, 8], verify_tiers.needles(2, 12, vocab=1000), vocab=1000, progress=progress)
    assert lines == [
        (f"reference: needle 1/2 among {N - 1} co-runners (the {N}-slot graph)", 0),
        (f"reference: needle 2/2 among {N - 1} co-runners (the {N}-slot graph)", 1),
        ("size 8: 2 needles, each among 7 co-runners", 2),
        ("size 8: differs from step 5", 4),
        ("size 16: 2 needles, each among 15 co-runners", 4),
        ("size 16: identical", 6),
    ]


def test_a_server_whose_small_graphs_all_differ_gets_no_tiers():
    send, _ = graph_server([8, 16, N], same={N})
    found = verify_tiers.probe(send, N, [8, 16], verify_tiers.needles(2, 12, vocab=1000), vocab=1000)
    assert verify_tiers.verdict(found) == ([], {8: 5, 16: 5})


def test_requests_are_seeded_token_ids_within_the_vocabulary():
    needles = verify_tiers.needles(3, 32, vocab=500, seed=4)
    assert [len(b["input_ids"]) for b in needles] == [32, 256, 2048]
    assert needles == verify_tiers.needles(3, 32, vocab=500, seed=4)
    others = verify_tiers.corunners(5, 40, vocab=500, seed=9)
    assert all(b["stream"] and not b["return_logprob"] for b in others)
    assert all(100 <= t < 500 for b in needles + others for t in b["input_ids"])
    assert all(b["sampling_params"]["ignore_eos"] for b in needles + others)
    assert verify_tiers.corunner_tokens(256, 32) >= 32 + 256


def test_the_needle_is_sent_only_once_every_corunner_streams(streaming_generate):
    url, events = streaming_generate
    send = verify_tiers.sender(url)
    got = send(verify_tiers.corunners(12, 40, vocab=1000, seed=1), verify_tiers.needles(1, 6, vocab=1000)[0])
    assert got == Generation.of([7] * 6, [-0.25] * 6)
    needle_at = next(t for tag, what, t in events if tag == "needle")
    firsts = [t for tag, what, t in events if what == "first chunk"]
    assert len(firsts) == 12 and max(firsts) < needle_at


def test_a_reference_round_needs_the_whole_sequences_of_n_minus_1_co_runners_and_a_needle():
    bodies = verify_tiers.needles(2, 32, vocab=1000)  # prompts of 32 and 2,048 tokens
    tokens = verify_tiers.corunner_tokens(256, 32)
    assert verify_tiers.pool_needed(256, bodies) == 255 * (48 + tokens + 1) + (2048 + 32 + 1)
    assert all(len(b["input_ids"]) <= verify_tiers.CORUNNER_PROMPT for b in verify_tiers.corunners(200, 8, 1000, 3))


def test_a_server_whose_pool_cannot_hold_a_reference_round_is_not_probed():
    bodies = verify_tiers.needles(2, 32, vocab=1000)
    need = verify_tiers.pool_needed(256, bodies)
    line = "[TP0] max_total_num_tokens={}, chunked_prefill_size=8192, max_running_requests=256, context_len=4096"
    assert verify_tiers.pool_problem(line.format(need), 256, bodies) is None
    problem = verify_tiers.pool_problem(line.format(need - 1), 256, bodies)
    assert problem.startswith(f"the candidate server's KV pool holds {need - 1} tokens; a reference round reserves "
                              f"{need} (N - 1 = 255 co-runners and a needle)") and "--mem-fraction-static" in problem
    assert "logged no KV pool size" in verify_tiers.pool_problem("INFO nothing here", 256, bodies)
