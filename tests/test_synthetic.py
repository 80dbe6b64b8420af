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


def test_tokenizer_serves_text_and_chat(ckpt):
    """The checkpoint's tokenizer loads through transformers and SGLang and round-trips text."""
    import transformers
    from sglang.srt.utils.hf_transformers_utils import get_tokenizer

    from corun_sglang.verify import WORDS

    tok = transformers.AutoTokenizer.from_pretrained(str(ckpt))
    ids = tok.encode("the river w900 zebra", add_special_tokens=False)
    assert ids == [1 + WORDS.index("the"), 1 + WORDS.index("river"), 900, 0]
    assert tok.decode(ids[:3]) == "the river w900"
    text = tok.apply_chat_template(
        [{"role": "user", "content": "the light"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>user the light<|im_end|> <|im_start|>assistant "
    chat = tok.convert_ids_to_tokens(tok.encode(text, add_special_tokens=False))
    assert chat == ["<|im_start|>", "user", "the", "light", "<|im_end|>", "<|im_start|>", "assistant"]
    assert max(tok.get_vocab().values()) == 1023
    assert get_tokenizer(str(ckpt)).encode("the river", add_special_tokens=False) == ids[:2]


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    return synthetic.write_checkpoint(tmp_path_factory.mktemp("moe"), "qwen3-moe-tiny", seed=5, device="cpu")


def test_moe_checkpoint_has_hub_layout_and_sglang_reads_it(moe):
    """Per-expert tensors named as in Qwen3-30B-A3B's published checkpoint."""
    from sglang.srt.configs.model_config import ModelConfig

    cfg = synthetic.hf_config("qwen3-moe-tiny")
    w = _weights(moe)
    layer = "model.layers.1.mlp."
    assert w[layer + "gate.weight"].shape == (cfg["num_experts"], cfg["hidden_size"])
    for j in range(cfg["num_experts"]):
        assert w[f"{layer}experts.{j}.gate_proj.weight"].shape == (64, 128)
        assert w[f"{layer}experts.{j}.down_proj.weight"].shape == (128, 64)
    assert not any(".mlp.gate_proj." in k for k in w)
    mc = ModelConfig(str(moe))
    assert mc.hf_config.architectures == ["Qwen3MoeForCausalLM"]
    assert mc.hf_config.num_experts == 8 and mc.hf_config.num_experts_per_tok == 2


def test_router_logits_have_realistic_spread(moe):
    """Unit-scale inputs give router logits of std ~1.5: routing depends on the token."""
    import torch

    gate = _weights(moe)["model.layers.0.mlp.gate.weight"].float()
    x = torch.randn(4000, gate.shape[1], generator=torch.Generator().manual_seed(0))
    logits = x @ gate.T
    assert 1.2 < logits.std().item() < 1.8
    top = logits.topk(2, dim=-1).indices
    assert len({tuple(sorted(r)) for r in top.tolist()}) > 10  # many distinct expert pairs
