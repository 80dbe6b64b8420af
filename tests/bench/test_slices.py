"""``bench/slices.sh``: the named slices, the records they serve, and split slices."""

from pathlib import Path


def test_slices_script_names_its_slices_and_refuses_unknown_ones(tmp_path):
    import subprocess

    script = Path(__file__).resolve().parents[2] / "bench" / "slices.sh"
    text = script.read_text()
    for name in ("dense-core", "dense-long", "dense-sweep", "dense-ablation", "dense-ablation-c16", "dense-tiers",
                 "dense-tiers-lt", "dense-profile-lt", "dense-profile", "dense-padding", "moe-core", "moe-core-tiers",
                 "moe-tiers-bi", "moe-pack-bi", "dense-pack", "dense-pack-wait", "dense-pack-short", "dense-pack-c16",
                 "moe-long", "moe-profile", "moe-tiers", "moe-padding", "tp2-core", "sampler"):
        assert f"#   {name}" in text and f"{name})" in text
    done = subprocess.run(["bash", str(script), str(tmp_path / "r"), "no-such-slice"], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown slice no-such-slice" in done.stdout
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: bench/slices.sh RESULTS SLICE..." in usage.stdout


def test_the_records_a_slice_names_load_and_share_one_environment():
    """A slice that serves committed records must name ones a server can load, and a tiers record and a
    pack record made in one environment: the server refuses either unless it matches the host."""
    import re

    from corun_sglang.records.record import PackRecord, TiersRecord

    root = Path(__file__).resolve().parents[2]
    text = (root / "bench" / "slices.sh").read_text()
    named = 0
    for slice_text in re.split(r"\n\s+[a-z0-9-]+\) ", text):
        found = dict(re.findall(r"--(tiers|pack) (docs/results/\S+\.json)", slice_text))
        records = {}
        if "tiers" in found:
            records["tiers"] = TiersRecord.load(root / found["tiers"])
        if "pack" in found:
            records["pack"] = PackRecord.load(root / found["pack"])
            assert records["pack"].needles and all(n > 0 for n in records["pack"].needles.values())
        for record in records.values():
            assert record.environment["gpu"] == "NVIDIA H200" and record.environment["tp_size"] == 1
        if len(records) == 2:
            assert records["tiers"].environment == records["pack"].environment, found
        named += len(records)
    # moe-core-tiers, moe-tiers-bi, moe-pack-bi, dense-pack, dense-pack-wait, dense-pack-short, dense-pack-c16
    assert named >= 12


def test_slices_script_runs_only_the_named_workloads_of_a_split_slice(tmp_path):
    import os
    import subprocess

    script = Path(__file__).resolve().parents[2] / "bench" / "slices.sh"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text('#!/bin/sh\necho "$@"\n')
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(script), str(tmp_path / "r"), "dense-core=sharegpt", "dense-core"],
                          capture_output=True, text=True, env=env)
    runs = [line for line in done.stdout.splitlines() if line.startswith("-m bench.run ")]
    assert done.returncode == 0 and len(runs) == 2
    assert runs[0].endswith("--workloads sharegpt")
    assert all("--study dense-core " in line for line in runs)
    assert runs[1].endswith("--workloads sharegpt,azure-conv,fixed-1024-128,fixed-64-448")
    assert all("--done" not in line for line in runs)
    env["DONE"] = str(tmp_path / "committed.jsonl")
    done = subprocess.run(["bash", str(script), str(tmp_path / "r"), "moe-core"], capture_output=True, text=True, env=env)
    assert f"--done {tmp_path / 'committed.jsonl'}" in done.stdout
