"""``bench/workloads.py``: trace rows and fixed shapes."""

import pytest

from bench import workloads


def test_workloads_are_the_first_rows_and_fixed_shapes():
    pairs = workloads.lengths("sharegpt", 300)
    assert len(pairs) == 300 and pairs[0] == (18, 407)
    assert workloads.lengths("fixed-4096-128", 3) == [(4096, 128)] * 3
    prompts = workloads.prompts([(5, 1), (7, 1)], seed=1)
    assert [len(p) for p in prompts] == [5, 7] and prompts == workloads.prompts([(5, 1), (7, 1)], seed=1)
    for name in workloads.ALL:
        assert len(workloads.lengths(name, 300)) == 300


def test_an_rl_group_is_one_prompt_sent_for_each_of_its_samples_back_to_back():
    pairs = workloads.lengths("rl-group", 1024)
    assert len(pairs) == 1024 and all(pairs[k] == pairs[k - k % 8] for k in range(1024))
    trace = [r for r in workloads._rows(workloads.MULTITURN) if r[0] <= workloads.RL_MAX_INPUT][:128]
    assert pairs[::8] == [(i, min(o, workloads.OUTPUT_CAP)) for i, o in trace]
    prompts = workloads.workload_prompts("rl-group", pairs[:24], seed=3)
    assert [len(p) for p in prompts] == [i for i, _ in pairs[:24]]
    assert all(prompts[k] == prompts[k - k % 8] for k in range(24)) and prompts[0] != prompts[8] != prompts[16]
    assert prompts == workloads.workload_prompts("rl-group", pairs[:24], seed=3)
    with pytest.raises(ValueError, match="multiples of 8"):
        workloads.lengths("rl-group", 1001)


def test_a_session_row_becomes_turns_whose_prompts_grow_by_the_reply_and_a_user_message():
    system, cap = workloads.SYSTEM, workloads.OUTPUT_CAP
    users = 3000 - system - 2 * cap
    assert workloads.session_turns(3000, 500) == [(system + users // 3, cap), (system + 2 * (users // 3) + cap, cap),
                                                  (3000, cap)]
    # a row too short to hold the system prompt and three user messages is raised to hold them
    least = system + 3 * workloads.MIN_USER + 2 * 40
    assert workloads.session_turns(900, 40)[-1] == (least, 40)


def test_sessions_share_one_system_prompt_and_each_turn_is_the_length_its_pair_gives():
    pairs = workloads.lengths("sessions", 768)
    assert len(pairs) == 768
    trace = [r for r in workloads._rows(workloads.MULTITURN) if r[0] <= workloads.SESSION_MAX_INPUT][:256]
    assert pairs[2::3] == [workloads.session_turns(i, o)[-1] for i, o in trace]
    convs = workloads.sessions(pairs[:9], seed=5)
    assert len(convs) == 3 and convs[0].system == convs[2].system and len(convs[0].system) == workloads.SYSTEM
    for conv, turns in zip(convs, [pairs[k:k + 3] for k in range(0, 9, 3)]):
        prompt = len(conv.system)
        for t, (user, out, (length, reply)) in enumerate(zip(conv.users, conv.outputs, turns)):
            prompt += len(user) + (turns[t - 1][1] if t else 0)  # the reply before, then the user message
            assert prompt == length and out == reply and len(user) >= workloads.MIN_USER
    assert convs[0].users[0] != convs[1].users[0] and convs == workloads.sessions(pairs[:9], seed=5)
    with pytest.raises(ValueError, match="multiples of 3"):
        workloads.lengths("sessions", 10)
