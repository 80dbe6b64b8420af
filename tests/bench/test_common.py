"""``bench/common.py``: the options and checkpoint every serving benchmark shares."""


from bench import common


def test_common_options_and_prepare_reuse_an_existing_checkpoint(tmp_path):
    import argparse

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    parser = argparse.ArgumentParser()
    common.add_options(parser, out=str(tmp_path / "o" / "runs.jsonl"), server_args="--x")
    args = parser.parse_args(["--checkpoint", str(tmp_path / "ckpt"), "--logs", str(tmp_path / "logs")])
    assert common.prepare(args) == tmp_path / "ckpt"
    assert (tmp_path / "o").is_dir() and (tmp_path / "logs").is_dir() and args.server_args == "--x"


def test_median_ms_times_one_call_of_the_function(monkeypatch):
    import time

    import pytest

    from bench import common

    # a clock that only the calls move: the trials' calls take 1, 2 and 6 ms each, a median of 2 (a mean: 3)
    clock = {"now": 0.0, "trial": 0}
    took = (1, 2, 6)
    monkeypatch.setattr(time, "perf_counter", lambda: clock["now"])
    calls = []

    def call():
        calls.append(1)
        clock["now"] += took[clock["trial"]] / 1e3
        if len(calls) % 3 == 0:
            clock["trial"] += 1

    assert common.median_ms(call, iters=3, trials=3, cuda=False) == pytest.approx(2.0)
    assert len(calls) == 9


def test_save_writes_the_result_so_far_and_prints_nothing(tmp_path, capsys):
    import json

    from bench import common

    out = tmp_path / "r.json"
    common.save({"stage": 1}, str(out))
    common.save({"stage": 2}, None)  # nowhere to write: nothing happens
    assert json.loads(out.read_text()) == {"stage": 1} and capsys.readouterr().out == ""
