"""``calibration``: ``--corun`` alone serves the records verified for its environment, verifying them once."""

import json
import threading
import types

import pytest

from corun_sglang import calibration, config, records
from corun_sglang.pack_record import Record as PackRecord
from corun_sglang.packing import PackingError
from corun_sglang.tiers import Record as TiersRecord

ENV = {"gpu": "NVIDIA H200"}


def test_tier_candidates_are_the_quarters_of_n():
    assert calibration.tier_candidates(256) == [64, 128, 192]
    assert calibration.tier_candidates(64) == [16, 32, 48]
    assert calibration.tier_candidates(16) == [8, 12]
    assert calibration.tier_candidates(8) == []


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
    from corun_sglang.server_args import _sglang_defaults

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


class FakeProbes:
    """Probes that write real records, as the verifiers do, and count their calls and the server options
    each got; the tiers stand-in logs its environment, as a tiers candidate server does."""

    def __init__(self, tiers=(64, 128), pack_fails=False):
        self.calls = {"tiers": 0, "pack": 0}
        self.flags = {"tiers": [], "pack": []}
        self.tier_list, self.pack_fails = tuple(tiers), pack_fails
        self.lock = threading.Lock()

    def tiers(self, model_path, candidates, n, out, log, server_args, progress):
        with self.lock:
            self.calls["tiers"] += 1
            self.flags["tiers"].append(list(server_args))
        with open(log, "a") as f:
            f.write(records.environment_line(ENV) + "\n")
        record = TiersRecord(n=n, tiers=self.tier_list, environment=ENV)
        out.write_text(json.dumps(record.to_json()))
        return record

    def pack(self, model_path, pack, out, log, server_args, progress):
        with self.lock:
            self.calls["pack"] += 1
            self.flags["pack"].append(list(server_args))
        if self.pack_fails:
            raise PackingError("a pack of 1024 tokens does not verify here")
        record = PackRecord(pack=pack, shortest=33, environment=ENV)  # the tiny Qwen3 shape's
        out.write_text(json.dumps(record.to_json()))
        return record

    def probes(self):
        return calibration.Probes(self.tiers, self.pack)


def _args(tmp_path, **kw):
    base = dict(model_path="m", max_running_requests=256, corun_calibrate="auto", corun_calibration_dir=str(tmp_path),
                corun_decode_tiers=None, corun_decode_tier_candidates=None, corun_prefill_pack=None,
                corun_prefill_pack_candidate=None, corun_prefill_pack_wait=0)
    return types.SimpleNamespace(**{**base, **kw})


PARTS = {"model": "abc", "gpu": "NVIDIA H200"}


def test_the_first_start_calibrates_and_later_starts_serve_the_cache(tmp_path):
    fake = FakeProbes()
    args = _args(tmp_path)
    first = calibration.prepare(args, lambda: PARTS, "NVIDIA H200", probes=fake.probes())
    assert first.source == "calibrated" and first.tiers == [64, 128] and first.pack == 1024
    assert args.corun_decode_tiers.endswith("tiers.json") and args.corun_prefill_pack.endswith("pack.json")
    assert args.corun_prefill_pack_wait == calibration.PACK_WAIT
    again = _args(tmp_path, corun_prefill_pack_wait=4)
    second = calibration.prepare(again, lambda: PARTS, "NVIDIA H200", probes=fake.probes())
    assert second.source == "cached" and fake.calls == {"tiers": 1, "pack": 1}
    assert again.corun_decode_tiers == args.corun_decode_tiers and again.corun_prefill_pack_wait == 4  # given wait wins
    other = calibration.prepare(_args(tmp_path), lambda: {**PARTS, "gpu": "NVIDIA H100"}, "NVIDIA H100",
                                probes=fake.probes())
    assert other.source == "calibrated" and fake.calls == {"tiers": 2, "pack": 2}  # another environment
    forced = calibration.prepare(_args(tmp_path, corun_calibrate="force"), lambda: PARTS, "NVIDIA H200",
                                 probes=fake.probes())
    assert forced.source == "calibrated" and fake.calls == {"tiers": 3, "pack": 3}


def test_a_failed_probe_leaves_its_part_unserved_and_says_why(tmp_path):
    fake = FakeProbes(tiers=(), pack_fails=True)
    args = _args(tmp_path)
    got = calibration.prepare(args, lambda: PARTS, "NVIDIA H200", probes=fake.probes())
    assert got.tiers is None and got.pack is None
    assert "no candidate" in got.why["tiers"] and "does not verify" in got.why["pack"]
    assert args.corun_decode_tiers is None and args.corun_prefill_pack is None and args.corun_prefill_pack_wait == 0
    assert calibration.prepare(_args(tmp_path), lambda: PARTS, "NVIDIA H200", probes=fake.probes()).source == "cached"
    assert fake.calls == {"tiers": 1, "pack": 1}  # the verdict is cached too


def test_given_records_off_and_no_gpu_never_probe(tmp_path):
    fake = FakeProbes()

    def parts():
        raise AssertionError("the key is not computed")

    for args, gpu, want in [(_args(tmp_path, corun_decode_tiers="t.json"), "H200", "given"),
                            (_args(tmp_path, corun_prefill_pack_candidate=1024), "H200", "given"),
                            (_args(tmp_path, corun_calibrate="off"), "H200", "off"),
                            (_args(tmp_path), None, "no-gpu")]:
        assert calibration.prepare(args, parts, gpu, probes=fake.probes()).source == want
    assert fake.calls == {"tiers": 0, "pack": 0}


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
    assert fake.calls == {"tiers": 1, "pack": 1} and sorted(got) == ["cached"] * 3 + ["calibrated"]


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
    args = _args(tmp_path)
    calibration.prepare(args, lambda: PARTS, "NVIDIA H200", probes=FakeProbes().probes())
    served = make_args(corun=True, corun_decode_tiers=args.corun_decode_tiers,
                       corun_prefill_pack=args.corun_prefill_pack, corun_prefill_pack_wait=args.corun_prefill_pack_wait,
                       disable_cuda_graph=False)
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

    docker = Path(__file__).resolve().parents[1] / "docker"
    compose = yaml.safe_load((docker / "compose.yaml").read_text())
    service = compose["services"]["corun-sglang"]
    env = dict(item.split("=", 1) for item in service["environment"])
    mounts = dict(reversed(m.rsplit(":", 1)) for m in service["volumes"])
    assert mounts[env["CORUN_SGLANG_CACHE"]] in compose["volumes"]  # a named volume: kept across restarts
    assert f"CORUN_SGLANG_CACHE={env['CORUN_SGLANG_CACHE']}" in (docker / "Dockerfile").read_text()


def test_the_memory_budget_goes_to_the_probes_but_does_not_name_the_calibration():
    from corun_sglang.server_args import _sglang_defaults

    defaults = _sglang_defaults()
    args = types.SimpleNamespace(**{**defaults, "mem_fraction_static": 0.5, "max_total_tokens": 100000, "tp_size": 2})
    assert "--mem-fraction-static" in calibration.flags(args, defaults, set())
    keyed = calibration.flags(args, defaults, calibration.MEMORY_OPTIONS)
    assert keyed == ["--tp-size", "2"]


def test_the_tiers_server_prefills_eagerly_unless_the_serving_command_chooses():
    eager = "--disable-prefill-cuda-graph"
    assert calibration.tiers_flags(["--tp-size", "2"]) == ["--tp-size", "2", eager]
    for chosen in (["--disable-prefill-cuda-graph"], ["--cuda-graph-backend-prefill", "breakable"],
                   ["--cuda-graph-config", '{"prefill": {"backend": "breakable"}}'],
                   ["--cuda-graph-config", "not json"]):
        assert calibration.tiers_flags(chosen) == chosen
    decode_only = ["--cuda-graph-config", '{"decode": {"max_bs": 256}}']
    assert calibration.tiers_flags(decode_only) == [*decode_only, eager]


def test_the_tiers_candidate_has_the_environment_of_the_server_serving_its_record(sglang_plugins, tiny_model,
                                                                                  tmp_path):
    """The tiers server's eager prefill is no field of a record's environment (``records.NUMERIC_OPTIONS``):
    the record it writes passes the start-up check (``records.foreign``) of a server that serves it, with
    its prefill graph and its pack."""
    from sglang.srt.server_args import prepare_server_args

    def parse(*argv):
        return prepare_server_args(["--model-path", tiny_model, "--device", "cuda", *argv])

    def environment(args):
        return records.environment({"hidden_size": 256}, "torch.bfloat16", args, gpu="g", cuda="13.0",
                                   installed={"sglang": "0.5.17"}, blas=records.blas_setup({}))

    serving_flags = ["--chunked-prefill-size", "4096", "--mem-fraction-static", "0.8"]
    entry = _args(tmp_path)
    calibration.prepare(entry, lambda: PARTS, "NVIDIA H200", probes=FakeProbes().probes())
    serving = parse("--corun", "--corun-decode-tiers", entry.corun_decode_tiers, "--corun-prefill-pack",
                    entry.corun_prefill_pack, *serving_flags)
    candidate = parse("--corun", "--max-running-requests", "256", "--corun-decode-tier-candidates", "64,128,192",
                      *calibration.tiers_flags(serving_flags))
    assert candidate.cuda_graph_config.prefill.backend == "disabled"
    assert serving.cuda_graph_config.prefill.backend == "breakable" and serving.mem_fraction_static == 0.8
    tiers = types.SimpleNamespace(environment=environment(candidate), source="tiers.json")
    served = [records.Served(tiers, "--corun-decode-tiers", "verify-tiers")]
    assert records.mismatches(tiers.environment, environment(serving)) == []
    assert records.foreign(served, environment(serving)) is None


def test_the_tiers_probe_gets_the_eager_prefill_and_the_pack_probe_the_serving_options(tmp_path):
    fake = FakeProbes()
    calibration.run_probes(tmp_path, "m", 256, ["--tp-size", "2"], fake.probes(), lambda line: None)
    assert fake.flags == {"tiers": [["--tp-size", "2", "--disable-prefill-cuda-graph"]], "pack": [["--tp-size", "2"]]}
