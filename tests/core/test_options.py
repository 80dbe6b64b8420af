"""The allowlist of server options, on SGLang 0.5.17's real ``ServerArgs`` and parser."""

import collections
import dataclasses
from pathlib import Path

import pytest

from corun_sglang.core import config, options, refusals

DOCS = Path(__file__).resolve().parents[2] / "docs" / "options.md"


@pytest.fixture(scope="module")
def sglang_fields(sglang_plugins):
    from corun_sglang.serving.server_args import CorunServerArgs

    return [f.name for f in dataclasses.fields(CorunServerArgs.__mro__[1])]


@pytest.fixture
def parse(sglang_plugins, tiny_model):
    from sglang.srt.server_args import prepare_server_args

    def run(*argv):
        return prepare_server_args(["--model-path", tiny_model, "--device", "cuda", "--corun", *argv])

    return run


def test_every_sglang_option_is_classified_once(sglang_fields):
    assert options.unclassified(sglang_fields) == []
    named = collections.Counter(n for g in options.GROUPS for n in g.names)
    assert [n for n, count in named.items() if count > 1] == []
    assert sorted(set(named) - set(sglang_fields)) == []  # no stale names
    assert {g.kind for g in options.GROUPS} == set(options.KINDS)
    assert all(g.allows is not None for g in options.GROUPS if g.kind == "verified")


def test_an_option_the_table_does_not_know_is_refused_when_set():
    args = type("Args", (), {"new_option": 3, "port": 1})()
    defaults = {"new_option": None, "port": 30000}
    (message,) = options.refusals(args, defaults)
    assert message.startswith("--new-option 3: not verified under --corun")
    assert "Fix: drop --new-option" in message
    args.new_option = None
    assert options.refusals(args, defaults) == []


@pytest.mark.parametrize("argv, named", [
    (["--enable-priority-scheduling"], "--enable-priority-scheduling"),
    (["--tp-size", "2", "--flashinfer-allreduce-fusion-backend", "trtllm"], "--flashinfer-allreduce-fusion-backend"),
    (["--dcp-size", "2"], "--dcp-size"),
    (["--ep-size", "2", "--moe-a2a-backend", "deepep"], "--moe-a2a-backend"),
    (["--quantization", "fp8"], "--quantization"),
    (["--enable-custom-logit-processor"], "--enable-custom-logit-processor"),
    (["--nnodes", "2"], "--nnodes"),
    (["--enable-fp32-lm-head"], "--enable-fp32-lm-head"),
    (["--page-size", "16"], "--page-size"),
    (["--grpc-mode"], "--grpc-mode"),
    (["--dtype", "float16"], "--dtype"),
    (["--moe-runner-backend", "flashinfer_trtllm"], "--moe-runner-backend"),
    (["--schedule-policy", "lpm"], "--schedule-policy"),
])
def test_unverified_options_are_refused_by_name(parse, argv, named):
    with pytest.raises(config.CorunConfigError) as err:
        parse(*argv)
    (problem,) = [p for p in err.value.problems if p.startswith(named)]
    assert "not verified under --corun" in problem and "Fix:" in problem


@pytest.mark.parametrize("value", ["0", "-5"])
def test_n_below_one_is_refused(parse, value):
    with pytest.raises(config.CorunConfigError, match="--max-running-requests: .*1 or more"):
        parse("--max-running-requests", value)


def test_free_and_verified_options_serve(parse):
    args = parse("--mem-fraction-static", "0.5", "--max-total-tokens", "5000", "--log-level", "debug",
                 "--skip-tokenizer-init", "--load-format", "dummy", "--moe-runner-backend", "triton",
                 "--served-model-name", "x", "--enable-metrics", "--chunked-prefill-size", "1024",
                 "--dtype", "bfloat16", "--api-key", "k", "--port", "31000", "--context-length", "2048")
    assert args.corun_config.chunked_prefill_size == 1024


def test_without_corun_nothing_is_refused(sglang_plugins, tiny_model):
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(["--model-path", tiny_model, "--device", "cuda", "--page-size", "16",
                                "--schedule-policy", "lpm"])
    assert args.page_size == 16 and not args.corun


def test_tp2_keeps_every_all_reduce_on_nccl(parse):
    args = parse("--tp-size", "2")
    assert args.enforce_disable_flashinfer_allreduce_fusion and args.disable_custom_all_reduce
    assert args.flashinfer_allreduce_fusion_backend is None
    object.__setattr__(args, "flashinfer_allreduce_fusion_backend", "trtllm")  # SGLang's auto-enable, resolved
    assert any("fused all-reduce ('trtllm')" in p for p in config.resolution_problems(args, config.Records(), args.get_attention_backends()))


def test_the_options_page_is_generated_from_the_table():
    assert DOCS.read_text() == options.markdown((r.option, r.why) for r in refusals.REFUSALS), (
        "docs/options.md is stale: python -m corun_sglang.core.options > docs/options.md")
