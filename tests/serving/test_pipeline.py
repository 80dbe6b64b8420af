"""``pipeline``: a ``--corun`` start goes one way: check, records, defaults, SGLang resolves, freeze."""

import dataclasses
import re
import types
from pathlib import Path

import pytest

from corun_sglang.core import config, refusals
from corun_sglang.probes import calibration
from corun_sglang.records import environment
from corun_sglang.serving import pipeline
from corun_sglang.records.record import PackRecord, TiersRecord

ENV = {"gpu": "NVIDIA H200"}
ROOT = Path(__file__).resolve().parents[2]


class Probes:
    """A candidate server's start and probes that write the records a verifier writes (decode tiers 64 and 128, a
    pack of 1024 from 33 tokens); ``calls`` counts the probes run."""

    def __init__(self):
        self.calls = 0

    def start(self, model_path, options, log):
        Path(log).write_text(environment.environment_line(ENV) + "\n")
        return types.SimpleNamespace(url="http://127.0.0.1:1", stop=lambda grace=60: None)

    def tiers(self, server, model_path, candidates, n, out, progress):
        self.calls += 1
        record = TiersRecord(n=n, tiers=(64, 128), environment=ENV)
        record.write(out)
        return record

    def pack(self, server, model_path, pack, out, progress):
        self.calls += 1
        record = PackRecord(pack=pack, shortest=33, environment=ENV)
        record.write(out)
        return record


@pytest.fixture
def calibrating(monkeypatch, tmp_path):
    """A GPU (by name) and probes that verify at once: ``--corun`` calibrates into ``tmp_path``."""
    probes = Probes()
    monkeypatch.setattr(calibration, "gpu_name", lambda environ=None: "NVIDIA H200")
    monkeypatch.setattr(calibration, "default_probes", lambda: calibration.Probes(probes.start, probes.tiers, probes.pack))
    return probes


def test_a_calibrated_start_serves_record_objects_and_hides_nothing_on_the_options(make_args, calibrating, tmp_path):
    args = make_args(corun=True, corun_calibration_dir=str(tmp_path))
    cfg = args.corun_config
    assert cfg.decode_tiers == (64, 128) and cfg.decode_tiers_verified and cfg.prefill_pack == 1024
    assert isinstance(cfg.tier_record, TiersRecord) and isinstance(cfg.pack_record, PackRecord)
    assert cfg.prefill_pack_wait == calibration.PACK_WAIT and cfg.calibration["source"] == "calibrated"
    # nothing written back into the options: no record paths, no hidden attributes
    assert args.corun_decode_tiers is None and args.corun_prefill_pack is None and args.corun_prefill_pack_wait is None
    assert [name for name in vars(args) if name.startswith("_corun")] == ["_corun_config"]
    assert args.cuda_graph_bs_decode == [64, 128, 256] and cfg.prefill_graph_sizes[0] == 1024


def test_the_calibration_stage_reads_the_options_and_writes_none(make_args, calibrating, tmp_path, monkeypatch):
    seen = {}
    real = pipeline.records

    def records_stage(args, *rest, **kw):
        before = dict(vars(args))
        out = real(args, *rest, **kw)
        seen["unchanged"] = before == dict(vars(args))
        return out

    monkeypatch.setattr(pipeline, "records", records_stage)
    make_args(corun=True, corun_calibration_dir=str(tmp_path))
    assert seen == {"unchanged": True} and calibrating.calls == 2


def test_every_refusal_is_evaluated_once_per_start(make_args, calibrating, tmp_path, monkeypatch):
    counts = {}

    def counted(refusal):
        def applies(args, served):
            counts[refusal.option] = counts.get(refusal.option, 0) + 1
            return refusal.applies(args, served)

        return dataclasses.replace(refusal, applies=applies)

    monkeypatch.setattr(refusals, "REFUSALS", tuple(counted(r) for r in refusals.REFUSALS))
    make_args(corun=True, corun_calibration_dir=str(tmp_path))
    assert set(counts.values()) == {1} and len(counts) == len(refusals.REFUSALS)


def test_a_refused_start_stops_before_calibrating_with_every_problem(make_args, calibrating, tmp_path):
    with pytest.raises(config.CorunConfigError) as err:
        make_args(corun=True, corun_calibration_dir=str(tmp_path), enable_mixed_chunk=True, tp_size=4)
    assert len(err.value.problems) == 2 and calibrating.calls == 0


def test_a_calibrated_pack_the_options_exclude_is_not_served_and_says_why(make_args, calibrating, tmp_path):
    cfg = make_args(corun=True, corun_calibration_dir=str(tmp_path), disable_prefill_cuda_graph=True).corun_config
    assert cfg.prefill_pack is None and cfg.decode_tiers == (64, 128)
    assert "breakable prefill graph" in cfg.calibration["why"]["pack"]
    cfg = make_args(corun=True, corun_calibration_dir=str(tmp_path), corun_prefix_cache=True).corun_config
    assert cfg.prefill_pack is None and cfg.prefix_grid is not None and "prefix" in cfg.calibration["why"]["pack"]


def test_the_candidate_server_runs_the_serving_gemm_library_and_each_library_calibrates_apart(
        make_args, calibrating, tmp_path, monkeypatch):
    started = []
    real = calibrating.start
    monkeypatch.setattr(calibrating, "start",
                        lambda model_path, options, log: started.append(list(options)) or real(model_path, options, log))
    lt = make_args(corun=True, corun_calibration_dir=str(tmp_path)).corun_config
    plain = make_args(corun=True, corun_calibration_dir=str(tmp_path), corun_gemm_library="cublas").corun_config
    assert (lt.gemm_library, plain.gemm_library) == ("cublaslt", "cublas")
    assert "--corun-gemm-library" not in started[0]  # the default travels as the default
    assert started[1][started[1].index("--corun-gemm-library") + 1] == "cublas"
    assert lt.calibration["folder"] != plain.calibration["folder"] and calibrating.calls == 4
    make_args(corun=True, corun_calibration_dir=str(tmp_path), corun_gemm_library="cublas")
    assert len(started) == 2  # found in the cache: no third candidate server


def test_a_given_wait_wins_and_a_wait_needs_a_pack(make_args, calibrating, tmp_path):
    cfg = make_args(corun=True, corun_calibration_dir=str(tmp_path), corun_prefill_pack_wait=4).corun_config
    assert cfg.prefill_pack == 1024 and cfg.prefill_pack_wait == 4
    cfg = make_args(corun=True, corun_calibration_dir=str(tmp_path), corun_prefill_pack_wait=0).corun_config
    assert cfg.prefill_pack == 1024 and cfg.prefill_pack_wait == 0 and "waits" not in cfg.summary()  # never
    with pytest.raises(config.CorunConfigError, match="a pack waits only with --corun-prefill-pack"):
        make_args(corun=True, corun_calibrate="off", corun_prefill_pack_wait=4)


def test_given_records_are_loaded_once_in_the_check_and_win(make_args, calibrating, tmp_path):
    served = make_args(corun=True, corun_calibration_dir=str(tmp_path)).corun_config
    folder = Path(served.calibration["folder"])
    cfg = make_args(corun=True, corun_decode_tiers=str(folder / calibration.TIERS)).corun_config
    assert cfg.decode_tiers == (64, 128) and cfg.prefill_pack is None and cfg.calibration["source"] == "given"
    with pytest.raises(config.CorunConfigError, match="--corun-decode-tiers .*cannot read it"):
        make_args(corun=True, corun_decode_tiers=str(tmp_path / "missing.json"))


def test_n_defaults_in_one_place():
    """``max_running_requests or 256`` is written once, in ``config.batch_size``."""
    found = [f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "corun_sglang").rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"max_running_requests\b[^\n]*\bor\b", line) or re.search(r"\bor 256\b", line)]
    assert found == ["corun_sglang/core/config.py:" + str(next(
        n for n, line in enumerate((ROOT / "corun_sglang" / "core" / "config.py").read_text().splitlines(), 1)
        if "return args.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS" in line))], found


def test_a_measuring_server_says_so_in_its_summary_and_fingerprint(make_args, measurable):
    from corun_sglang.core import fingerprint

    plain = make_args(corun=True).corun_config
    measuring = make_args(corun=True, corun_measure=f" {measurable},").corun_config
    assert measuring.measured == (measurable,) and plain.measured == ()
    assert f"UNVERIFIED request parameters served: {measurable}" in measuring.summary()
    assert fingerprint.configuration(measuring) != fingerprint.configuration(plain)
    with pytest.raises(config.CorunConfigError, match="--corun-measure names lora_path"):
        make_args(corun=True, corun_measure="lora_path")
    with pytest.raises(config.CorunConfigError, match="--corun-measure names regex, .*served without it"):
        make_args(corun=True, corun_measure=f"regex,{measurable}")  # verified: nothing to measure
    with pytest.raises(config.CorunConfigError, match="--corun-measure names top_logprobs_num, .*served without it"):
        make_args(corun=True, corun_measure="top_logprobs_num")  # verified by scenario n
    with pytest.raises(config.CorunConfigError, match="--corun-measure names grammar_under_reasoning, which no GPU"):
        make_args(corun=True, corun_measure="grammar_under_reasoning")  # no condition left: verified by scenario t
    with pytest.raises(config.CorunConfigError, match="--corun-measure: part of --corun"):
        make_args(corun_measure=measurable)
