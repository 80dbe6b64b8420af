"""``synthetic``: checkpoints SGLang's Qwen3 loader accepts, with real spread, reproducible by seed."""

import json

import pytest
from safetensors.torch import load_file

from corun_sglang import synthetic


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return synthetic.write_checkpoint(tmp_path_factory.mktemp("ckpt"), "qwen3-tiny", seed=5, device="cpu")


def _weights(folder):
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(load_file(str(folder / shard)))
    assert set(out) == set(index["weight_map"])
    return out


def test_names_and_shapes_match_the_qwen3_architecture(ckpt):
    import torch
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(str(ckpt))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in _weights(ckpt).items()} == expected


def test_sglang_reads_the_config(ckpt):
    from sglang.srt.configs.model_config import ModelConfig

    mc = ModelConfig(str(ckpt))
    assert mc.hf_config.architectures == ["Qwen3ForCausalLM"]
    assert mc.vocab_size == 1024


def test_weights_are_random_normal_not_dummy(ckpt):
    w = _weights(ckpt)
    linear = w["model.layers.0.mlp.up_proj.weight"].float()
    norm = w["model.layers.1.input_layernorm.weight"].float()
    embed = w["model.embed_tokens.weight"].float()
    assert abs(linear.std().item() - synthetic.LINEAR_STD) < 0.002
    assert abs(norm.mean().item() - 1.0) < 0.05 and norm.std().item() > 0.05
    assert abs(embed.std().item() - synthetic.EMBED_STD) < 0.05


def test_same_seed_same_weights_other_seed_other_weights(ckpt, tmp_path):
    again = _weights(synthetic.write_checkpoint(tmp_path / "a", "qwen3-tiny", seed=5, device="cpu"))
    other = _weights(synthetic.write_checkpoint(tmp_path / "b", "qwen3-tiny", seed=6, device="cpu"))
    first = _weights(ckpt)
    assert all(first[k].equal(again[k]) for k in first)
    assert not first["lm_head.weight"].equal(other["lm_head.weight"])
