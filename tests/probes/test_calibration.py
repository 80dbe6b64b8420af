"""``calibration``: ``--corun`` alone serves the records verified for its environment, verifying them once."""

import json
import threading
import time
import types
from pathlib import Path

import pytest

from corun_sglang.core import config
from corun_sglang.probes import calibration
from corun_sglang.records import environment
from corun_sglang.core.packing import PackingError
from corun_sglang.records.record import PackRecord, TiersRecord
from corun_sglang.core import errors

ENV = {"gpu": "NVIDIA H200"}


def test_tier_candidates_are_an_eighth_and_the_quarters_of_n():
    assert calibration.tier_candidates(256) == [32, 64, 128, 192]
    assert calibration.tier_candidates(512) == [64, 128, 256, 384]
    assert calibration.tier_candidates(128) == [16, 32, 64, 96]
    assert calibration.tier_candidates(64) == [8, 16, 32, 48]
    assert calibration.tier_candidates(16) == [8, 12]
    assert calibration.tier_candidates(8) == []


def test_the_key_holds_the_gemm_library_the_schedulers_run_not_this_process(make_args, monkeypatch):
    """A launcher's own BLAS preference is not its schedulers' (``--corun-gemm-library`` is): two servers that
    differ only in the library key two calibrations, whatever the launcher process prefers."""
    import torch

    monkeypatch.setattr(calibration, "model_config", lambda args: {"hidden_size": 64})
    lt = make_args(corun=True, corun_calibrate="off")
    plain = make_args(corun=True, corun_calibrate="off", corun_gemm_library="cublas")
    before = torch.backends.cuda.preferred_blas_library()
    try:
        for launcher in ("cublas", "cublaslt"):
            torch.backends.cuda.preferred_blas_library(launcher)
            parts = {name: calibration.key_parts(a, [], "NVIDIA H100") for name, a in (("lt", lt), ("plain", plain))}
            assert parts["lt"]["blas"]["library"] == "cublaslt" and parts["plain"]["blas"]["library"] == "cublas"
            assert calibration.key(parts["lt"]) != calibration.key(parts["plain"])
    finally:
        torch.backends.cuda.preferred_blas_library(before)


@pytest.mark.parametrize("mode,given,gpu,cached,want", [
    ("auto", True, "H200", True, "given"), ("force", True, "H200", False, "given"),
    ("off", False, "H200", True, "off"), ("auto", False, None, True, "no-gpu"),
    ("auto", False, "H200", True, "cached"), ("auto", False, "H200", False, "calibrate"),
    ("force", False, "H200", True, "calibrate"),
])
def test_plan(mode, given, gpu, cached, want):
    assert calibration.plan(mode, given, gpu, cached) == want


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="auto, off, force"):
        calibration.plan("sometimes", False, "H200", False)


def test_the_key_follows_every_part():
    parts = {"model": "abc", "flags": ["--tp-size", "2"], "gpu": "NVIDIA H200", "versions": {"torch": "2.11"}}
    assert calibration.key(parts) == calibration.key(dict(reversed(list(parts.items()))))
    for name, other in [("model", "abd"), ("flags", []), ("gpu", "NVIDIA H100"), ("versions", {"torch": "2.12"})]:
        assert calibration.key({**parts, name: other}) != calibration.key(parts)


def test_flags_rebuild_the_options_a_candidate_server_needs():
    from corun_sglang.serving.server_args import _sglang_defaults

    defaults = _sglang_defaults()
    args = types.SimpleNamespace(**{**defaults, "tp_size": 2, "chunked_prefill_size": 2048, "host": "0.0.0.0",
                                    "port": 31000, "api_key": "secret", "enable_fp32_lm_head": True,
                                    "load_format": "dummy", "json_model_override_args": '{"a": 1}',
                                    "corun": True})
    got = calibration.flags(args, defaults, {"api_key"})
    assert got == ["--load-format", "dummy", "--json-model-override-args", '{"a": 1}', "--chunked-prefill-size", "2048",
                   "--tp-size", "2", "--enable-fp32-lm-head"] or set(got) == {
        "--load-format", "dummy", "--json-model-override-args", '{"a": 1}', "--chunked-prefill-size", "2048",
        "--tp-size", "2", "--enable-fp32-lm-head"}
    assert "--host" not in got and "--port" not in got and "--api-key" not in got and "--corun" not in got


class FakeServer:
    """Stands for a started candidate server: it logs its environment, as a candidate server does."""

    def __init__(self, model_path, options, log):
        self.url, self.log, self.options, self.stopped = "http://127.0.0.1:1", Path(log), list(options), False
        with open(log, "a") as f:
            f.write(environment.environment_line(ENV) + "\n")

    def log_text(self):
        return self.log.read_text()

    def stop(self, grace=60):
        self.stopped, self.grace = True, grace


class FakeProbes:
    """A candidate server's start and probes that write real records, as the verifiers do; ``events`` lists,
    in order, each start (with the server's options), each probe (with the server it ran on) and each stop."""

    def __init__(self, tiers=(64, 128), pack_fails=False, start_fails=False):
        self.events, self.servers = [], []
        self.tier_list, self.pack_fails, self.start_fails = tuple(tiers), pack_fails, start_fails
        self.lock = threading.Lock()

    def count(self, kind):
        return sum(1 for event in self.events if event[0] == kind)

    def start(self, model_path, options, log):
        with self.lock:
            self.events.append(("start", list(options)))
        if self.start_fails:
            raise RuntimeError("server exited with 1:\nLoaded weights leave no GPU memory for the KV cache")
        server = FakeServer(model_path, options, log)
        stop = server.stop
        server.stop = lambda grace=60: (self.events.append(("stop", server)), stop(grace))
        self.servers.append(server)
        return server

    def tiers(self, server, model_path, candidates, n, out, progress):
        with self.lock:
            self.events.append(("tiers", server))
        assert not server.stopped and environment.ENVIRONMENT_LOG in server.log_text()
        record = TiersRecord(n=n, tiers=self.tier_list, environment=ENV)
        record.write(out)
        return record

    def pack(self, server, model_path, pack, out, progress):
        with self.lock:
            self.events.append(("pack", server))
        assert not server.stopped
        if self.pack_fails:
            raise PackingError("a pack of 1024 tokens does not verify here")
        record = PackRecord(pack=pack, shortest=33, environment=ENV)  # the tiny Qwen3 shape's
        record.write(out)
        return record

    def probes(self):
        return calibration.Probes(self.start, self.tiers, self.pack)


def _args(tmp_path, **kw):
    base = dict(model_path="m", max_running_requests=256, corun_calibrate="auto", corun_calibration_dir=str(tmp_path),
                corun_decode_tiers=None, corun_decode_tier_candidates=None, corun_prefill_pack=None,
                corun_prefill_pack_candidate=None, corun_prefill_pack_wait=0, cuda_graph_bs_decode=None,
                cuda_graph_bs_prefill=None, chunked_prefill_size=None)
    return types.SimpleNamespace(**{**base, **kw})


PARTS = {"model": "abc", "gpu": "NVIDIA H200"}


def test_the_first_start_calibrates_and_later_starts_serve_the_cache(tmp_path):
    fake = FakeProbes()
    args = _args(tmp_path)
    first = calibration.prepare(args, lambda: PARTS, "NVIDIA H200", probes=fake.probes())
    assert first.source == "calibrated" and first.tiers == [64, 128] and first.pack == 1024
    assert first.tiers_file.name == "tiers.json" and first.pack_file.name == "pack.json"
    assert args == _args(tmp_path)  # what it serves is returned; the options are only read
    second = calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200", probes=fake.probes())
    assert second.source == "cached" and [e[0] for e in fake.events] == ["start", "pack", "tiers", "stop"]
    assert second.tiers_file == first.tiers_file and second.pack_file == first.pack_file
    other = calibration.prepare(_args(tmp_path), lambda: {**PARTS, "gpu": "NVIDIA H100"}, "NVIDIA H100",
                                probes=fake.probes())
    assert other.source == "calibrated" and fake.count("start") == 2  # another environment
    forced = calibration.prepare(_args(tmp_path, corun_calibrate="force"), lambda: PARTS, "NVIDIA H200",
                                 probes=fake.probes())
    assert forced.source == "calibrated" and fake.count("start") == 3 and fake.count("tiers") == 3


def test_a_failed_probe_leaves_its_part_unserved_and_says_why(tmp_path):
    fake = FakeProbes(tiers=(), pack_fails=True)
    args = _args(tmp_path)
    got = calibration.prepare(args, lambda: PARTS, "NVIDIA H200", probes=fake.probes())
    assert got.tiers is None and got.pack is None and got.tiers_file is None and got.pack_file is None
    assert "no candidate" in got.why["tiers"] and "does not verify" in got.why["pack"]
    assert calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200", probes=fake.probes()).source == "cached"
    assert fake.count("start") == 1  # the verdict is cached too


def test_given_records_off_and_no_gpu_never_probe(tmp_path):
    fake = FakeProbes()

    def parts():
        raise AssertionError("the key is not computed")

    for args, gpu, want in [(_args(tmp_path, corun_decode_tiers="t.json"), "H200", "given"),
                            (_args(tmp_path, corun_prefill_pack_candidate=1024), "H200", "given"),
                            (_args(tmp_path, corun_calibrate="off"), "H200", "off"),
                            (_args(tmp_path), None, "no-gpu")]:
        assert calibration.prepare(args, parts, gpu, probes=fake.probes()).source == want
    assert fake.events == []


def test_servers_starting_at_once_calibrate_once(tmp_path):
    fake = FakeProbes()
    got = []

    def start():
        got.append(calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200", probes=fake.probes()).source)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.count("start") == 1 and sorted(got) == ["cached"] * 3 + ["calibrated"]


def test_a_partial_or_older_entry_is_not_read(tmp_path):
    (tmp_path / calibration.ENTRY).write_text("{")
    assert calibration.read_entry(tmp_path) is None
    (tmp_path / calibration.ENTRY).write_text(json.dumps({"format": calibration.FORMAT - 1}))
    assert calibration.read_entry(tmp_path) is None


def test_the_cache_folder(tmp_path):
    assert calibration.cache_root(str(tmp_path), {}) == tmp_path
    assert calibration.cache_root(None, {"CORUN_SGLANG_CACHE": str(tmp_path)}) == tmp_path / "calibration"
    assert calibration.cache_root(None, {}).parts[-3:] == (".cache", "corun-sglang", "calibration")


def test_a_server_serves_what_calibration_cached(make_args, tmp_path):
    """The records an entry points at load in a real ``--corun`` ServerArgs (here given, as a cached start
    hands them over)."""
    entry = calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200", probes=FakeProbes().probes())
    served = make_args(corun=True, corun_decode_tiers=str(entry.tiers_file), corun_prefill_pack=str(entry.pack_file),
                       corun_prefill_pack_wait=calibration.PACK_WAIT, disable_cuda_graph=False)
    assert served.corun_config.decode_tiers == (64, 128) and served.corun_config.prefill_pack == 1024
    assert served.corun_config.calibration["source"] == "given"


def test_without_a_gpu_corun_serves_plain_n_and_says_so(make_args):
    args = make_args(corun=True)
    assert args.corun_config.calibration["source"] == "no-gpu"
    assert args.corun_config.decode_tiers == () and args.corun_config.prefill_pack is None


def test_calibration_options_need_corun(make_args):
    with pytest.raises(config.CorunConfigError, match="add --corun"):
        make_args(corun_calibrate="off")


def test_the_image_and_compose_keep_the_calibration_cache_on_a_volume():
    from pathlib import Path

    import yaml

    docker = Path(__file__).resolve().parents[2] / "docker"
    compose = yaml.safe_load((docker / "compose.yaml").read_text())
    service = compose["services"]["corun-sglang"]
    env = dict(item.split("=", 1) for item in service["environment"])
    mounts = dict(reversed(m.rsplit(":", 1)) for m in service["volumes"])
    assert mounts[env["CORUN_SGLANG_CACHE"]] in compose["volumes"]  # a named volume: kept across restarts
    assert f"CORUN_SGLANG_CACHE={env['CORUN_SGLANG_CACHE']}" in (docker / "Dockerfile").read_text()


def test_the_memory_budget_goes_to_the_probes_but_does_not_name_the_calibration():
    from corun_sglang.serving.server_args import _sglang_defaults

    defaults = _sglang_defaults()
    args = types.SimpleNamespace(**{**defaults, "mem_fraction_static": 0.5, "max_total_tokens": 100000, "tp_size": 2})
    assert "--mem-fraction-static" in calibration.flags(args, defaults, set())
    keyed = calibration.flags(args, defaults, calibration.MEMORY_OPTIONS)
    assert keyed == ["--tp-size", "2"]


def test_the_prefix_cache_names_no_calibration_but_the_grid_size_it_needs_does():
    """``--corun-prefix-cache`` is one of corun's own options, so it names no calibration; but it refuses any
    ``--chunked-prefill-size`` but its grid, and that size does: the suite's ``corun-prefix`` arm (1,024 where
    the other arms pass 2,048) calibrates under a key of its own, which a ``calibrate-*-prefix`` chunk makes."""
    from corun_sglang.core.prefix_cache import GRID
    from corun_sglang.serving.server_args import _sglang_defaults

    defaults = _sglang_defaults()

    def keyed(**options):
        return calibration.flags(types.SimpleNamespace(**{**defaults, **options}), defaults,
                                 calibration.MEMORY_OPTIONS)

    suite = {"attention_backend": "flashinfer", "load_snapshot_publish_interval": 1}
    assert keyed(**suite, chunked_prefill_size=2048, corun_prefix_cache=True) == keyed(**suite,
                                                                                     chunked_prefill_size=2048)
    assert keyed(**suite, chunked_prefill_size=GRID) != keyed(**suite, chunked_prefill_size=2048)
    assert "--chunked-prefill-size" in keyed(**suite, chunked_prefill_size=GRID)


def test_the_tiers_server_prefills_eagerly_unless_the_serving_command_chooses():
    eager = "--disable-prefill-cuda-graph"
    assert calibration.tiers_flags(["--tp-size", "2"]) == ["--tp-size", "2", eager]
    for chosen in (["--disable-prefill-cuda-graph"], ["--cuda-graph-backend-prefill", "breakable"],
                   ["--cuda-graph-config", '{"prefill": {"backend": "breakable"}}'],
                   ["--cuda-graph-config", "not json"]):
        assert calibration.tiers_flags(chosen) == chosen
    decode_only = ["--cuda-graph-config", '{"decode": {"max_bs": 256}}']
    assert calibration.tiers_flags(decode_only) == [*decode_only, eager]


def test_the_candidate_has_the_environment_of_the_server_serving_its_records(sglang_plugins, tiny_model, tmp_path):
    """The candidate server differs from the serving one by its candidates and, without a pack to verify, its
    eager prefill: neither is a field of a record's environment (``environment.NUMERIC_OPTIONS``), so the
    records it writes pass the start-up check (``environment.foreign``) of a server that serves them, with
    the serving command's memory budget."""
    from sglang.srt.server_args import prepare_server_args

    def parse(*argv):
        return prepare_server_args(["--model-path", tiny_model, "--device", "cuda", *argv])

    def env_of(args):
        return environment.environment({"hidden_size": 256}, "torch.bfloat16", args, gpu="g", cuda="13.0",
                                       installed={"sglang": "0.5.17"}, blas=environment.blas_setup({}))

    serving_flags = ["--chunked-prefill-size", "4096", "--mem-fraction-static", "0.8"]
    entry = calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200", probes=FakeProbes().probes())
    serving = parse("--corun", "--corun-decode-tiers", str(entry.tiers_file), "--corun-prefill-pack",
                    str(entry.pack_file), *serving_flags)
    both = parse(*calibration.candidate_flags(serving_flags, 256, [64, 128, 192], 1024))
    tiers_only = parse(*calibration.candidate_flags(serving_flags, 256, [64, 128, 192], None))
    assert both.corun_config.decode_tiers == (64, 128, 192) and both.corun_config.prefill_pack == 1024
    assert both.cuda_graph_config.prefill.backend == "breakable"
    assert tiers_only.cuda_graph_config.prefill.backend == "disabled" and tiers_only.corun_config.prefill_pack is None
    assert both.mem_fraction_static == tiers_only.mem_fraction_static == serving.mem_fraction_static == 0.8
    for candidate in (both, tiers_only):
        record = types.SimpleNamespace(environment=env_of(candidate), source="tiers.json")
        served = [config.Served(record, "--corun-decode-tiers", "verify-tiers")]
        assert environment.mismatches(record.environment, env_of(serving)) == []
        assert environment.foreign(served, env_of(serving)) is None


def _said(lines):
    def say(line):
        lines.append(line)
    return say


def test_one_candidate_server_runs_the_pack_probe_then_the_tiers_probe(tmp_path):
    fake = FakeProbes()
    lines = []
    verdicts = calibration.run_probes(tmp_path, "m", 256, ["--tp-size", "2"], fake.probes(), _said(lines),
                                      [64, 128, 192], 1024)
    assert verdicts["tiers"] == [64, 128] and verdicts["pack"] == 1024 and verdicts["seconds"] >= 0
    [server] = fake.servers
    assert fake.events == [("start", calibration.candidate_flags(["--tp-size", "2"], 256, [64, 128, 192], 1024)),
                           ("pack", server), ("tiers", server), ("stop", server)]
    assert server.log == tmp_path / calibration.SERVER_LOG and server.grace == 0  # killed: nothing of it is kept
    assert server.options[:8] == ["--corun", "--max-running-requests", "256", "--corun-decode-tier-candidates",
                                  "64,128,192", "--corun-prefill-pack-candidate", "1024", "--tp-size"]
    assert "decode tiers: verifying [64, 128, 192] against N = 256" in lines
    assert "prefill pack: verifying 1024 tokens" in lines


def test_a_probe_that_fails_leaves_its_part_unserved_and_the_other_served(tmp_path):
    fake = FakeProbes()

    def tiers(server, model_path, candidates, n, out, progress):
        fake.tiers(server, model_path, candidates, n, out, progress)
        raise RuntimeError("the candidate server's KV pool holds 1000 tokens")

    got = calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200",
                              probes=calibration.Probes(fake.start, tiers, fake.pack))
    assert got.tiers is None
    assert got.why["tiers"] == "the probe failed: the candidate server's KV pool holds 1000 tokens"
    assert got.pack == 1024 and [e[0] for e in fake.events] == ["start", "pack", "tiers", "stop"]
    assert calibration.read_entry(Path(got.folder))["tiers"] == got.why["tiers"]  # the entry, whole


def test_a_candidate_server_that_does_not_start_leaves_both_parts_unserved_and_says_why(tmp_path):
    fake = FakeProbes(start_fails=True)
    got = calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200", probes=fake.probes())
    assert got.tiers is None and got.pack is None
    assert got.why == {part: "the candidate server did not start: server exited with 1:" for part in ("tiers", "pack")}
    assert [e[0] for e in fake.events] == ["start"]
    assert calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200", probes=fake.probes()).source == "cached"


@pytest.mark.parametrize("options,left_out", [
    ({}, {}),
    ({"cuda_graph_bs_decode": [1, 2, 256]}, {"tiers": "the decode graph sizes are given"}),
    ({"max_running_requests": 8}, {"tiers": "N = 8 has no quarter of at least 8 below it"}),
    ({"disable_prefill_cuda_graph": True}, {"pack": "prefill runs without a CUDA graph"}),
    ({"cuda_graph_bs_prefill": [1024]}, {"pack": "the prefill graph token counts are given"}),
    ({"chunked_prefill_size": 512}, {"pack": "exceeds --chunked-prefill-size 512"}),
    ({"corun_prefix_cache": True}, {}),  # one of corun's own options: not in the key, so it decides nothing here
])
def test_the_scope_leaves_out_what_the_serving_options_rule_out_and_says_why(tmp_path, options, left_out):
    args = _args(tmp_path, **options)
    candidates, pack, why = calibration.scope(args, config.batch_size(args))
    assert set(why) == set(left_out) and all(left_out[part] in why[part] for part in why)
    assert (candidates == []) == ("tiers" in why) and (pack is None) == ("pack" in why)
    if "tiers" not in why:
        assert candidates == calibration.tier_candidates(config.batch_size(args))
    if "pack" not in why:
        assert pack == calibration.PACK


def test_a_part_left_out_is_not_probed_and_its_verdict_says_why(tmp_path):
    fake = FakeProbes()
    got = calibration.prepare(_args(tmp_path, chunked_prefill_size=512), lambda: PARTS, "NVIDIA H200",
                              probes=fake.probes())
    assert got.tiers == [64, 128] and got.pack is None and got.why["pack"].startswith("not calibrated: a pack of 1024")
    assert [e[0] for e in fake.events] == ["start", "tiers", "stop"]
    assert "--corun-prefill-pack-candidate" not in fake.events[0][1] and "--disable-prefill-cuda-graph" in fake.events[0][1]
    nothing = FakeProbes()
    got = calibration.prepare(_args(tmp_path, chunked_prefill_size=512, cuda_graph_bs_decode=[256]),
                              lambda: {**PARTS, "flags": "other"}, "NVIDIA H200", probes=nothing.probes())
    assert got.tiers is None and got.pack is None and nothing.events == []  # no server started for nothing


def test_an_entry_calibrated_again_keeps_nothing_of_the_one_before(tmp_path):
    """Forced again where the pack no longer verifies: the earlier pack record and the earlier server logs go
    with the earlier entry, so the folder holds only what the new calibration made."""
    first = calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200", probes=FakeProbes().probes())
    folder = Path(first.folder)
    (folder / "tiers.server.log").write_text("an older calibration's server\n")
    assert first.pack_file.exists()
    again = calibration.prepare(_args(tmp_path, corun_calibrate="force"), lambda: PARTS, "NVIDIA H200",
                                probes=FakeProbes(pack_fails=True).probes())
    assert again.pack is None and not (folder / calibration.PACK_FILE).exists()
    assert sorted(p.name for p in folder.iterdir()) == [calibration.ENTRY, calibration.SERVER_LOG, calibration.TIERS]
