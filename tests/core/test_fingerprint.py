"""``fingerprint``: equal inputs give one fingerprint, a change to any field another."""

import dataclasses

import pytest

from corun_sglang.core import fingerprint

ENV = {"model": "abc", "dtype": "torch.bfloat16", "gpu": "NVIDIA H200", "cuda": "12.8", "tp_size": 1,
       "blas library": "cublas", "version sglang": "0.5.17", "version corun-sglang": "0.1.0"}


@pytest.fixture
def config(make_args):
    return make_args(corun=True).corun_config


def _fp(env=ENV, conf=None, weights=("w0",)):
    return fingerprint.system_fingerprint(fingerprint.fields(env, conf, list(weights)))


def test_equal_inputs_give_one_fingerprint(config):
    conf = fingerprint.configuration(dataclasses.replace(config, prefill_graph_sizes=(512,)))
    first = _fp(conf=conf)
    assert first == _fp(env=dict(reversed(list(ENV.items()))), conf=dict(conf))
    assert first.startswith("fp_") and len(first) == 15 and int(first[3:], 16) >= 0


@pytest.mark.parametrize("field", sorted(ENV))
def test_each_environment_field_changes_it(config, field):
    conf = fingerprint.configuration(config)
    assert _fp(env={**ENV, field: f"other {ENV[field]}"}, conf=conf) != _fp(conf=conf)


def test_each_ranks_weights_change_it(config):
    conf = fingerprint.configuration(config)
    assert len({_fp(conf=conf, weights=w) for w in [("w0",), ("w1",), ("w0", "w1"), ("w0", "w2")]}) == 4


@pytest.mark.parametrize("change", [
    {"decode_batch_size": 64}, {"decode_tiers": (8, 32)}, {"decode_tiers_verified": True},
    {"prefill_requests_per_batch": None}, {"prefill_graph": "disabled"}, {"chunked_prefill_size": 1024},
    {"page_size": 16}, {"random_seed": 1}, {"moe_padding": "compute"}, {"prefill_pack": 256},
    {"prefill_pack_shortest": 33}, {"prefill_pack_kernel": "fa3"}, {"prefill_pack_verified": True},
])
def test_each_configuration_field_changes_it(config, change):
    base = _fp(conf=fingerprint.configuration(config))
    assert _fp(conf=fingerprint.configuration(dataclasses.replace(config, **change))) != base


def test_prefill_graph_sizes_and_the_default_max_new_tokens_change_it(config):
    base = _fp(conf=fingerprint.configuration(config))
    assert _fp(conf=fingerprint.configuration(dataclasses.replace(config, prefill_graph_sizes=(256, 512)))) != base
    assert _fp(conf=fingerprint.configuration(dataclasses.replace(config, default_max_new_tokens=512))) != base


def test_a_wait_for_packs_is_not_a_field(config):
    """``--corun-prefill-pack-wait`` changes when a prompt is admitted, never its tokens."""
    base = _fp(conf=fingerprint.configuration(config))
    assert _fp(conf=fingerprint.configuration(dataclasses.replace(config, prefill_pack_wait=4))) == base
