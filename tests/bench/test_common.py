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


def test_median_ms_times_one_call_of_the_function():
    import time

    from bench import common

    calls = []

    def sleepy():
        calls.append(1)
        time.sleep(0.002)

    ms = common.median_ms(sleepy, iters=3, trials=3, cuda=False)
    assert len(calls) == 9 and 1.9 <= ms < 50


def test_save_writes_the_result_so_far_and_prints_nothing(tmp_path, capsys):
    import json

    from bench import common

    out = tmp_path / "r.json"
    common.save({"stage": 1}, str(out))
    common.save({"stage": 2}, None)  # nowhere to write: nothing happens
    assert json.loads(out.read_text()) == {"stage": 1} and capsys.readouterr().out == ""
