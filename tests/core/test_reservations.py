"""``reservations``: the KV numbers of full-sequence admission, and SGLang's max_new_tokens they rest on."""

import types

import pytest

from corun_sglang.core import policy, reservations

# The deployment the README quotes: a 104,000-token KV pool, a 40,960-token context, N = 256.
POOL, CONTEXT, N = 104_000, 40_960, 256
MAX_REQ_LEN = CONTEXT - 1  # SGLang's TpModelWorker: context_len - 1 where the pool holds it


def test_snapshot_sums_reservations_and_counts_the_waiting_that_do_not_fit():
    snap = reservations.snapshot([300, 200], [500, 501, 10, 1000], pool_tokens=1000, free_tokens=700, max_running=8)
    assert snap == reservations.Snapshot(reserved_tokens=500, used_tokens=300, pool_tokens=1000, waiting_for_kv=2,
                                         waiting_for_isolation=2)


def test_a_waiting_request_counts_exactly_when_admission_refuses_it_for_kv():
    running = [300, 200]
    for candidate in range(1, 1200, 7):
        snap = reservations.snapshot(running, [candidate], 1000, 0, max_running=8)
        admitted = policy.admits(candidate, running, pool_tokens=1000, max_running=8)
        assert (snap.waiting_for_kv == 1) is not admitted
        assert (snap.waiting_for_isolation == 1) is admitted


@pytest.mark.parametrize("running,max_running,isolated", [
    ([100] * 6, 8, 2),  # two free slots of N: two of the three that fit wait for isolation, one for N
    ([100] * 8, 8, 0),  # N runs: all wait for N
    ([100] * 2, 8, 3),
])
def test_only_free_slots_of_n_count_as_waiting_for_isolation(running, max_running, isolated):
    snap = reservations.snapshot(running, [10, 10, 10, 5000], 2000, 0, max_running=max_running)
    assert (snap.waiting_for_kv, snap.waiting_for_isolation) == (1, isolated)


def _sglang_scheduler(corun_args):
    """What ``Scheduler.init_req_max_new_tokens`` reads of SGLang's scheduler, over the README's pool."""
    return types.SimpleNamespace(max_new_tokens_limit=None, page_size=1, max_req_len=MAX_REQ_LEN,
                                 max_total_num_tokens=POOL, server_args=corun_args)


@pytest.mark.parametrize("prompt,given", [(100, None), (100, 512), (40_000, None), (40_000, 5000), (1, None)])
def test_sglang_max_new_tokens_is_what_sglangs_scheduler_gives(make_args, prompt, given):
    from array import array

    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.sampling.sampling_params import SamplingParams

    sp = SamplingParams(max_new_tokens=given)
    sp.normalize(None)
    req = Req("r", "", array("q", range(prompt)), sp, vocab_size=1024)
    Scheduler.init_req_max_new_tokens(_sglang_scheduler(make_args()), req)
    assert req.sampling_params.max_new_tokens == reservations.sglang_max_new_tokens(prompt, MAX_REQ_LEN, POOL, 1, given)


def test_requests_without_max_tokens_run_two_at_once_in_the_readmes_pool():
    """A 100-token prompt without max_tokens reserves the context; with max_tokens 512, 169 run at once."""
    unbounded = policy.reserved_tokens(100, reservations.sglang_max_new_tokens(100, MAX_REQ_LEN, POOL, 1), 1)
    assert unbounded == CONTEXT - 1
    assert reservations.fit_at_once(unbounded, POOL, N) == 2
    bounded = policy.reserved_tokens(100, reservations.sglang_max_new_tokens(100, MAX_REQ_LEN, POOL, 1, 512), 1)
    assert reservations.fit_at_once(bounded, POOL, N) == 169
    assert reservations.fit_at_once(10, POOL, N) == N


def test_capacity_line_names_the_cliff_and_the_option():
    line = reservations.capacity_line(CONTEXT, MAX_REQ_LEN, POOL, 1, N, None)
    assert "\n" not in line
    assert "2 of N = 256" in line and "40,960-token context" in line and "104,000-token KV pool" in line
    assert "--corun-default-max-new-tokens" in line


@pytest.mark.parametrize("bound,page,expected", [
    (512, 1, "202 of N = 256 such requests fit the 104,000-token KV pool at once with 1-token prompts"),
    (128, 1, "all N = 256 such requests fit the 104,000-token KV pool at once while their prompts average at most "
             "277 tokens"),
    (128, 16, "prompt + 144 KV tokens: all N = 256 such requests fit the 104,000-token KV pool at once while their "
              "prompts average at most 256 tokens"),
])
def test_capacity_line_with_a_default_bound(bound, page, expected):
    line = reservations.capacity_line(CONTEXT, MAX_REQ_LEN, POOL, page, N, bound)
    assert f"max_new_tokens {bound} (--corun-default-max-new-tokens)" in line and expected in line


def test_the_prompt_room_the_line_gives_lets_all_n_fit():
    bound, page = 128, 16
    line = reservations.capacity_line(CONTEXT, MAX_REQ_LEN, POOL, page, N, bound)
    room = int(line.rsplit("at most ", 1)[1].split()[0].replace(",", ""))
    assert N * policy.reserved_tokens(room, bound, page) <= POOL < N * policy.reserved_tokens(room + page, bound, page)
