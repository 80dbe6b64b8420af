"""``bench/run.py``: slice scheduling, resumption, per-arm options and the rows it writes."""

import json
from pathlib import Path

import pytest

from bench import report_rows, run, workloads


def test_schedule_rotates_arms_and_resume_skips_whole_repetitions_only(tmp_path):
    order = run.schedule(["STD", "BI", "CoRun"], 3)
    assert order[:3] == [(0, "STD"), (0, "BI"), (0, "CoRun")]
    assert order[3:6] == [(1, "CoRun"), (1, "STD"), (1, "BI")]
    assert order[6:] == [(2, "BI"), (2, "CoRun"), (2, "STD")]  # each arm once in each place
    assert order[2][1] == order[3][1] and order[5][1] == order[6][1]  # one server at a time: 7 starts, not 9
    out = tmp_path / "runs.jsonl"
    row = {"shape": "s", "workload": "w", "concurrency": 8, "arm": "BI", "rep": 1}
    out.write_text(json.dumps(row) + "\n" + json.dumps({**row, "study": "x"}) + "\n")
    assert run.done_keys(out) == {("", "s", "w", 8, "BI", 1), ("x", "s", "w", 8, "BI", 1)}
    assert run.done_reps(out, ["BI"]) == {("", "s", "w", 8, 1), ("x", "s", "w", 8, 1)}
    assert run.done_reps(out, ["STD", "BI"]) == set()  # BI alone ran in rep 1: the repetition is not done


def test_plan_one_at_a_time_shares_server_starts_between_resumed_and_new_workloads():
    arms = ["STD", "BI", "CoRun"]
    fresh = {("a", 8): [0, 1, 2], ("b", 8): [0, 1, 2]}
    side = run.plan(fresh, arms, 3, one_at_a_time=False)
    assert side == [("a", 8, *step) for step in run.schedule(arms, 3)] + [("b", 8, *step) for step in run.schedule(arms, 3)]
    alone = run.plan(fresh, arms, 3, one_at_a_time=True)
    assert [(rep, arm) for _, _, rep, arm in alone[::2]] == run.schedule(arms, 3)  # nothing done: rep-major
    assert [w for w, *_ in alone] == ["a", "b"] * 9

    def starts(todo):
        return 1 + sum(x[3] != y[3] for x, y in zip(todo, todo[1:]))

    # two workloads left at repetition 2, one not begun: repetition 2 and the new one's 0 share servers
    resumed = {("a", 8): [2], ("b", 8): [2], ("c", 8): [0, 1, 2]}
    todo = run.plan(resumed, arms, 3, one_at_a_time=True)
    assert todo[:9] == [(w, 8, rep, arm) for arm in ("BI", "CoRun", "STD") for w, rep in (("a", 2), ("b", 2), ("c", 0))]
    assert [(rep, arm) for _, _, rep, arm in todo[9:]] == [(1, "STD"), (1, "BI"), (1, "CoRun"), (2, "CoRun"), (2, "STD"), (2, "BI")]
    assert starts(todo) == 7  # 3 for the first round, and none at a boundary between rounds
    assert sorted(todo) == sorted(run.plan(resumed, arms, 3, one_at_a_time=False))  # the same runs
    assert {(w, rep) for w, _, rep, _ in todo if w == "c"} == {("c", 0), ("c", 1), ("c", 2)}
    assert run.plan({("a", 8): []}, arms, 3, one_at_a_time=True) == []


def test_arm_args_reach_only_the_arm_named():
    extra = run.arm_args(["BI=--disable-prefill-cuda-graph", "BI=--foo 1"], ["STD", "BI", "CoRun"])
    assert extra == {"STD": [], "BI": ["--disable-prefill-cuda-graph", "--foo", "1"], "CoRun": []}
    for bad in ("BI", "XX=--foo"):  # no arm given, or an arm this run does not serve
        with pytest.raises(SystemExit, match="ARM=ARGS"):
            run.arm_args([bad], ["STD", "BI"])


def test_arm_env_reaches_only_the_arm_named():
    env = run.arm_env(["CoRun-tiers=TORCH_BLAS_PREFER_CUBLASLT=1", "CoRun-tiers=A=x=y"], ["STD", "CoRun-tiers"])
    assert env == {"STD": {}, "CoRun-tiers": {"TORCH_BLAS_PREFER_CUBLASLT": "1", "A": "x=y"}}
    for bad in ("CoRun-tiers=A", "CoRun-tiers==1", "BI=A=1"):  # no value, no name, an arm not served
        with pytest.raises(SystemExit, match="ARM=NAME=VALUE"):
            run.arm_env([bad], ["STD", "CoRun-tiers"])


def test_rep_runs_that_one_repetition_of_every_arm(tmp_path, monkeypatch, stand_in_server):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    (tmp_path / "ckpt" / "tokenizer.json").write_text("{}")
    out = tmp_path / "runs.jsonl"
    argv = ["--checkpoint", str(tmp_path / "ckpt"), "--out", str(out), "--logs", str(tmp_path / "logs"),
            "--workloads", "fixed-1024-128", "--requests", "2", "--concurrency", "2", "--reps", "3", "--rep", "2",
            "--arms", "STD,CoRun", "--max-total-tokens", "5000", "--study", "s1", "--warmup", "2"]
    monkeypatch.setattr(workloads, "lengths", lambda name, n: [(8, 3)] * n)
    assert run.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["arm"], r["rep"]) for r in rows) == [("CoRun", 2), ("STD", 2)]
    assert run.main(argv) == 0 and len(out.read_text().splitlines()) == 2  # done: not run again


@pytest.mark.parametrize("one_at_a_time", [False, True])
def test_run_writes_every_row_once_and_resumes(tmp_path, monkeypatch, one_at_a_time, stand_in_server):
    monkeypatch.setattr(stand_in_server, "one_at_a_time", one_at_a_time)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    (tmp_path / "ckpt" / "tokenizer.json").write_text("{}")
    out = tmp_path / "runs.jsonl"
    argv = ["--checkpoint", str(tmp_path / "ckpt"), "--out", str(out), "--logs", str(tmp_path / "logs"),
            "--workloads", "fixed-1024-128", "--requests", "2", "--concurrency", "2", "--reps", "2",
            "--arms", "STD,CoRun", "--max-total-tokens", "5000", "--study", "s1", "--warmup", "2"]
    argv += ["--one-at-a-time"] if one_at_a_time else []
    monkeypatch.setattr(workloads, "lengths", lambda name, n: [(8, 3)] * n)
    assert run.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["arm"], r["rep"]) for r in rows) == [("CoRun", 0), ("CoRun", 1), ("STD", 0), ("STD", 1)]
    assert all(r["completed"] == 2 and r["output_tokens"] == 6 for r in rows)
    # each row holds the decode samples its own run logged, less the first (it spans the idle time before)
    assert all(r["decode_steps"] == [[2, 200.0], [1, 1.0], [2, 200.0]] for r in rows)
    # and the prefill iterations of its own run (the warm-up's are not a measured run's)
    assert all(r["prefill_batches"] == [[1, 8], [1, 8]] for r in rows)
    # one log per study and arm: another study's server of the same arm writes its own
    assert sorted(p.name for p in (tmp_path / "logs").glob("*.log")) == ["s1-CoRun.log", "s1-STD.log"]
    # an arm started again (one at a time) adds to its log: both STD servers' lines stay
    assert (tmp_path / "logs" / "s1-STD.log").read_text().count("server started") == (2 if one_at_a_time else 1)
    # one server per arm side by side; one at a time, a start whenever the arm changes
    # (STD, CoRun | CoRun, STD: the rotation keeps CoRun across the repetitions' boundary)
    assert stand_in_server.started == (["other", "--corun", "other"] if one_at_a_time else ["other", "--corun"])
    assert not stand_in_server.alive
    # every server first serves the warm-up (prompts no measured run sends), then its measured runs
    warm = [b["input_ids"] for b in run.warmup_bodies([(8, 3)] * 2, 2)]
    measured = [len(rows) // len(stand_in_server.instances)] if not one_at_a_time else [1, 2, 1]
    for server, runs in zip(stand_in_server.instances, measured):
        assert sorted(server.httpd.received[:2]) == sorted(warm) and len(server.httpd.received) == 2 + 2 * runs
        assert not any(p in warm for p in server.httpd.received[2:])
        # each measured run from an empty prefix cache: one flush done per run (a flush refused while the
        # stand-in still counts the last request as streaming is retried)
        assert server.httpd.flushes.count(True) == runs
    # every repetition and arm sends the same prompts, and the rows keep each request's output digest
    sent = {tuple(p) for server in stand_in_server.instances for p in server.httpd.received[2:]}
    assert len(sent) == 2 and len({r["prompt_seed"] for r in rows}) == 1
    assert len({tuple(r["output_digests"]) for r in rows}) == 1 and None not in rows[0]["output_digests"]
    assert run.main(argv) == 0 and len(out.read_text().splitlines()) == 4  # resumed: nothing left to do
    assert all("gpu_uuid" in r and r["decode_wave"] == 2 and 0 < r["client_cpu_share"] for r in rows)
    # a repetition cut short (its last arm's row missing) is run again whole; the report keeps the new rows
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:-1]) + "\n")
    cut = json.loads(lines[-1])["rep"]
    assert run.main(argv) == 0
    again = [json.loads(line) for line in out.read_text().splitlines()[3:]]
    assert sorted((r["arm"], r["rep"]) for r in again) == [("CoRun", cut), ("STD", cut)]
    kept = report_rows.load(out)
    assert len(kept) == 4 and {r["time"] for r in kept if r["rep"] == cut} == {r["time"] for r in again}
    out.write_text("\n".join(lines) + "\n")
    assert {r["study"] for r in rows} == {"s1"}
    # the same runs in another study are not done yet
    assert run.main(["s2" if a == "s1" else a for a in argv]) == 0 and len(out.read_text().splitlines()) == 8
    # repetitions whole in a --done file are not run again; new rows go to --out alone
    other = tmp_path / "elsewhere.jsonl"
    assert run.main(["s3" if a == "s1" else str(other) if a == str(out) else a for a in argv] + ["--done", str(out)]) == 0
    assert len(other.read_text().splitlines()) == 4 and len(out.read_text().splitlines()) == 8
    assert run.main(["s2" if a == "s1" else str(other) if a == str(out) else a for a in argv] + ["--done", str(out)]) == 0
    assert len(other.read_text().splitlines()) == 4  # s2 was whole in --done: nothing ran


@pytest.fixture
def stand_in(tmp_path, monkeypatch, stand_in_server):
    """``run.py`` against ``StandIn`` servers on an empty checkpoint, workloads of (8, 3) requests:
    the results file and the options every such run shares."""
    monkeypatch.setattr(workloads, "lengths", lambda name, n: [(8, 3)] * n)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    out = tmp_path / "runs.jsonl"
    return out, ["--checkpoint", str(tmp_path / "ckpt"), "--out", str(out), "--logs", str(tmp_path / "logs"),
                 "--workloads", "fixed-1024-128", "--requests", "2", "--concurrency", "2", "--reps", "1",
                 "--max-total-tokens", "5000"]


def test_rows_at_tp_2_are_labelled_apart_from_tp_1(stand_in):
    out, argv = stand_in
    argv += ["--arms", "CoRun", "--shape", "qwen3-8b"]
    assert run.main(argv) == 0 and run.main(argv + ["--tp-size", "2"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["shape"], r["tp"]) for r in rows] == [("qwen3-8b", 1), ("qwen3-8b-tp2", 2)]
    assert rows[1]["server_command"][rows[1]["server_command"].index("--tp-size") + 1] == "2"


def test_the_tiers_arm_serves_the_record_verified_once_for_its_checkpoint(stand_in, monkeypatch):
    from corun_sglang.probes import verify_tiers
    from corun_sglang.records.record import TiersRecord

    out, argv = stand_in
    verified = []

    def verify(model_path, candidates, n, out, log, server_args=(), static_gb=None, env=None, **_):
        verified.append((candidates, n, list(server_args)))
        assert not env
        record = TiersRecord(n=n, tiers=(72, 128), environment={"gpu": "G"}, rejected={64: 3})
        record.write(out)
        return record

    monkeypatch.setattr(verify_tiers, "verify", verify)
    argv += ["--arms", "CoRun,CoRun-tiers", "--tier-candidates", "128,64,72"]
    assert run.main(argv) == 0
    assert verified == [([64, 72, 128], 256, verified[0][2])] and "--max-total-tokens" in verified[0][2]
    rows = {r["arm"]: r for r in map(json.loads, out.read_text().splitlines())}
    command = rows["CoRun-tiers"]["server_command"]
    logs = Path(argv[argv.index("--logs") + 1])
    assert command[command.index("--corun-decode-tiers") + 1] == str(logs / "tiers-qwen3-8b-n256.json")
    assert rows["CoRun-tiers"]["decode_tiers"] == [72, 128] and "--corun-decode-tiers" not in rows["CoRun"]["server_command"]
    out.unlink()
    assert run.main(argv) == 0 and len(verified) == 1  # the record is verified once per checkpoint and N


def test_the_tiers_arm_serves_a_given_record_without_verifying_one(stand_in, monkeypatch, tmp_path):
    from corun_sglang.probes import verify_tiers
    from corun_sglang.records.record import TiersRecord

    out, argv = stand_in

    def verify(*args, **kwargs):
        raise AssertionError("a given record is not verified again")

    monkeypatch.setattr(verify_tiers, "verify", verify)
    given = tmp_path / "record.json"
    TiersRecord(n=256, tiers=(96, 128), environment={"gpu": "G"}, rejected={}).write(given)
    argv += ["--arms", "STD,CoRun-tiers", "--tiers", str(given)]
    assert run.main(argv) == 0
    rows = {r["arm"]: r for r in map(json.loads, out.read_text().splitlines())}
    command = rows["CoRun-tiers"]["server_command"]
    assert command[command.index("--corun-decode-tiers") + 1] == str(given)
    assert rows["CoRun-tiers"]["decode_tiers"] == [96, 128] and "--corun-decode-tiers" not in rows["STD"]["server_command"]
    assert not list(Path(argv[argv.index("--logs") + 1]).glob("tiers-*.json"))


def test_an_arm_env_reaches_the_arms_server_its_tiers_verification_and_its_rows(stand_in, monkeypatch,
                                                                              stand_in_server):
    from corun_sglang.probes import verify_tiers
    from corun_sglang.records.record import TiersRecord

    out, argv = stand_in
    verified = []

    def verify(model_path, candidates, n, out, log, server_args=(), static_gb=None, env=None, **_):
        verified.append((out.name, env))
        record = TiersRecord(n=n, tiers=(32, 128), environment={"gpu": "G"}, rejected={})
        record.write(out)
        return record

    monkeypatch.setattr(verify_tiers, "verify", verify)
    argv += ["--arms", "STD,CoRun-tiers", "--tier-candidates", "32,128",
             "--arm-env", "CoRun-tiers=TORCH_BLAS_PREFER_CUBLASLT=1"]
    assert run.main(argv) == 0
    lt = {"TORCH_BLAS_PREFER_CUBLASLT": "1"}
    assert verified == [("tiers-qwen3-8b-n256-TORCH_BLAS_PREFER_CUBLASLT=1.json", lt)]
    assert {"--corun" in s.command: s.env for s in stand_in_server.instances} == {True: lt, False: {}}
    rows = {r["arm"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["CoRun-tiers"]["server_env"] == lt and "server_env" not in rows["STD"]


def test_corun_rows_record_what_calibration_served_and_the_ablation_turns_it_off(stand_in, monkeypatch):
    from corun_sglang.probes import verify_tiers
    from corun_sglang.records.record import TiersRecord

    out, argv = stand_in

    def verify(model_path, candidates, n, out, log, server_args=(), static_gb=None, env=None, **_):
        record = TiersRecord(n=n, tiers=(128,), environment={"gpu": "G"}, rejected={})
        record.write(out)
        return record

    monkeypatch.setattr(verify_tiers, "verify", verify)
    argv += ["--arms", "STD,CoRun-nocal,CoRun,CoRun-tiers", "--tier-candidates", "128"]
    assert run.main(argv) == 0
    rows = {r["arm"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["CoRun"]["server_command"][1:3] == ["--corun", "--max-running-requests"]  # --corun alone
    assert rows["CoRun"]["calibration"] == {"source": "cached", "tiers": [64], "pack": None}
    nocal = rows["CoRun-nocal"]["server_command"]
    assert nocal[nocal.index("--corun-calibrate") + 1] == "off" and rows["CoRun-nocal"]["calibration"] == {"source": "off"}
    # an arm given a record serves it: the record is on its command line, whatever calibration would serve
    assert "--corun-decode-tiers" in rows["CoRun-tiers"]["server_command"] and rows["CoRun-tiers"]["decode_tiers"] == [128]
    assert rows["CoRun-tiers"]["calibration"] == {"source": "given"}
    assert "calibration" not in rows["STD"] and "--corun-calibrate" not in rows["CoRun"]["server_command"]
    assert run.corun_contract("http://127.0.0.1:9") == {}  # a server that does not answer: nothing recorded


def test_an_arm_outside_the_known_ones_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        run.main(["--arms", "STD,Fast"])
    assert stop.value.code == 2 and "unknown arms ['Fast']" in capsys.readouterr().err


def test_a_run_holds_ten_requests_per_unit_of_concurrency_unless_told():
    from bench.run import requests_for

    assert requests_for(0, 256) == 2560 and requests_for(0, 16) == 300 and requests_for(40, 256) == 40


def test_the_peers_run_at_their_own_defaults_and_rows_record_what_served():
    from bench import run

    assert run.ARMS["STD"] == [] and run.ARMS["BI"] == ["--enable-deterministic-inference"]
    assert "--attention-backend" in run.ARMS["STD-flashinfer"] and "--attention-backend" in run.ARMS["BI-flashinfer"]
    info = {"max_total_num_tokens": 512000, "attention_backend": "fa3", "disable_radix_cache": False}
    assert run.served(info) == {"kv_pool_tokens": 512000, "attention_backend": "fa3", "radix_cache": True}
    assert run.served({}) == {"kv_pool_tokens": None, "attention_backend": None, "radix_cache": None}


def test_an_open_loop_load_is_a_rate_with_a_minute_of_arrivals():
    from bench.run import load_of, rate_of, requests_for

    assert rate_of("rate=8") == 8.0 and rate_of(256) is None
    assert requests_for(0, "rate=8") == 480 and requests_for(0, "rate=1") == 300
    assert load_of({"mode": "open", "request_rate": 8.0, "concurrency": None}) == "rate=8"
    assert load_of({"concurrency": 64}) == 64


@pytest.fixture
def prefix_run(tmp_path, monkeypatch, stand_in_server):
    """``run.py`` on the prefix-cache workloads (outputs of 4 tokens) against ``StandIn`` servers: the results
    file, and the options of a run of STD, CoRun-prefix and CoRun."""
    monkeypatch.setattr(workloads, "OUTPUT_CAP", 4)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    out = tmp_path / "runs.jsonl"
    return out, ["--checkpoint", str(tmp_path / "ckpt"), "--out", str(out), "--logs", str(tmp_path / "logs"),
                 "--concurrency", "8", "--reps", "1", "--max-total-tokens", "50000", "--warmup", "2",
                 "--arms", "STD,CoRun-prefix,CoRun"]


def _by_arm(out):
    return {r["arm"]: r for r in (json.loads(line) for line in out.read_text().splitlines())}


def test_an_rl_group_run_counts_the_prefill_each_arm_computed(prefix_run, stand_in_server):
    out, argv = prefix_run
    # four at a time: a group's last four samples find its prompt in the stand-in's cache (SGLang's kind: each
    # request caches its prompt once it ends)
    assert run.main(argv + ["--workloads", "rl-group", "--requests", "16", "--concurrency", "4"]) == 0
    rows = _by_arm(out)
    pairs = workloads.lengths("rl-group", 16)
    prompt = sum(i for i, _ in pairs)
    assert all(r["prompt_tokens"] == prompt and r["requests"] == 16 and r["completed"] == 16 for r in rows.values())
    # plain --corun computes every prompt; the arms with a prefix cache reuse a group's prompt
    assert rows["CoRun"]["cached_tokens"] == 0 and rows["CoRun"]["prefill_tokens"] == prompt
    for arm in ("STD", "CoRun-prefix"):
        assert rows[arm]["prefill_tokens"] + rows[arm]["cached_tokens"] == prompt and rows[arm]["cached_tokens"] > 0
    server = next(s for s in stand_in_server.instances if "--corun-prefix-cache" in s.command)
    sent = server.httpd.received[2:]  # after the warm-up
    assert sent[:8] == [sent[0]] * 8 and sent[8] != sent[0]  # a group's samples back to back
    # the prefix cache's arm prefills on its grid; the others at the chunk size given
    for s in stand_in_server.instances:
        size = s.command[s.command.index("--chunked-prefill-size") + 1]
        assert size == ("1024" if "--corun-prefix-cache" in s.command else "8192")


def test_a_sessions_run_sends_each_turn_after_the_last_with_its_reply(prefix_run, stand_in_server):
    out, argv = prefix_run
    assert run.main(argv + ["--workloads", "sessions", "--requests", "12"]) == 0
    rows = _by_arm(out)
    pairs = workloads.lengths("sessions", 12)
    assert all(r["prompt_tokens"] == sum(i for i, _ in pairs) and r["completed"] == 12 for r in rows.values())
    assert rows["CoRun"]["cached_tokens"] == 0 and 0 < rows["STD"]["prefill_tokens"] < rows["CoRun"]["prefill_tokens"]
    server = next(s for s in stand_in_server.instances if "--corun-prefix-cache" in s.command)
    sent = server.httpd.received[2:]
    system = sent[0][:workloads.SYSTEM]
    assert all(p[:workloads.SYSTEM] == system for p in sent)  # every session behind the one system prompt
    firsts = {i for i, _ in pairs[::3]}
    later = [p for p in sent if len(p) not in firsts]
    # each later turn extends a turn sent before it in its session: that prompt, its reply, a user message
    assert later and all(any(len(workloads.SYSTEM * [0]) < len(q) < len(p) and p[:len(q)] == q for q in sent)
                         for p in later)


def test_sessions_take_a_closed_loop_only(capsys):
    with pytest.raises(SystemExit):
        run.main(["--workloads", "sessions", "--request-rate", "4"])
    assert "closed loop only" in capsys.readouterr().err
