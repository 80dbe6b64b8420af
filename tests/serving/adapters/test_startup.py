"""``adapters.startup``: the decode graph runner's start checks a prefill pack record against this
environment, and a candidate logs its own."""

import types

import pytest

from adapters.helpers import PACK
from corun_sglang.serving.adapters import startup
from corun_sglang.core.stops import CorunContractError


@pytest.mark.parametrize("library", ["cublas", "cublaslt"])
def test_a_corun_scheduler_runs_its_gemms_through_the_configured_library_before_loading(make_args, monkeypatch,
                                                                                        library):
    """The library is set before SGLang's own ``Scheduler.__init__`` (weights, graph capture) runs; a scheduler
    without ``--corun`` keeps the process's (the control)."""
    import torch
    from sglang.srt.runtime_context import publish

    monkeypatch.setattr(startup, "check_startup", lambda: None)
    other = "cublas" if library == "cublaslt" else "cublaslt"
    before = torch.backends.cuda.preferred_blas_library()
    seen = []

    def sglang_init(self, server_args):
        seen.append(torch.backends.cuda.preferred_blas_library().name.lower())

    try:
        torch.backends.cuda.preferred_blas_library(other)
        publish(make_args(corun=True, corun_calibrate="off", corun_gemm_library=library), role="scheduler")
        startup.scheduler_init(sglang_init, object(), None)
        publish(make_args(), role="scheduler")
        torch.backends.cuda.preferred_blas_library(other)
        startup.scheduler_init(sglang_init, object(), None)
    finally:
        torch.backends.cuda.preferred_blas_library(before)
    assert seen == [library, other]


def test_a_pack_record_from_another_environment_stops_the_server_and_a_candidate_logs_its_own(
        make_args, tmp_path, monkeypatch, caplog):
    from corun_sglang.records import environment
    from corun_sglang.records.record import PackRecord, pack_candidate_from_log

    path = tmp_path / "pack.json"
    PackRecord(pack=PACK, shortest=33, environment={"gpu": "A"}).write(path)
    monkeypatch.setattr(startup.state, "environment", lambda model_runner: {"gpu": "B"})
    graphs = types.SimpleNamespace(capture_bs=[256])

    def runner(**options):
        """A model runner in a scheduler process serving ``--corun`` with ``options`` (published)."""
        from sglang.srt.runtime_context import publish

        args = make_args(corun=True, **options)
        publish(args, role="scheduler")
        return types.SimpleNamespace(server_args=args, req_to_token_pool=types.SimpleNamespace(size=300))

    with pytest.raises(CorunContractError,
                       match=r"--corun-prefill-pack .*pack.json was verified in another environment "
                             r"\(gpu: verified with 'A', this server has 'B'\).*verify-prefill-pack"):
        startup.decode_graph_runner_init("built", graphs, runner(corun_prefill_pack=str(path)))
    with caplog.at_level("WARNING"):
        assert startup.decode_graph_runner_init("built", graphs, runner(corun_prefill_pack_candidate=PACK)) == "built"
    assert environment.environment_from_log(caplog.text) == {"gpu": "B"}
    assert pack_candidate_from_log(caplog.text) == {"pack": PACK, "shortest": 33, "kernel": "fa2"}
    assert startup.decode_graph_runner_init("built", graphs, runner()) == "built"  # nothing to verify
