"""``synthetic``: checkpoints SGLang's Qwen3 loader accepts, with real spread, reproducible by seed."""

import json

import pytest
from safetensors.torch import load_file

from corun_sglang.tools import synthetic


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

    from corun_sglang.probes.generate import WORDS

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


class _Named:
    """Parameters under the names SGLang's Qwen3 / Qwen3-MoE models give them once loaded."""

    SHAPES = {
        "model.embed_tokens.weight": (512, 64),
        "model.layers.0.input_layernorm.weight": (64,),
        "model.layers.0.self_attn.qkv_proj.weight": (192, 64),
        "model.layers.0.self_attn.q_norm.weight": (32,),
        "model.layers.0.mlp.gate.weight": (16, 64),
        "model.layers.0.mlp.experts.w13_weight": (16, 96, 64),
        "model.layers.1.mlp.gate_up_proj.weight": (256, 64),
        "model.norm.weight": (64,),
        "lm_head.weight": (512, 64),
    }

    def __init__(self):
        import torch

        self.params = {k: torch.nn.Parameter(torch.zeros(s, dtype=torch.bfloat16), requires_grad=False)
                       for k, s in self.SHAPES.items()}

    def named_parameters(self):
        return iter(self.params.items())


def test_in_place_draw_gives_each_parameter_its_distribution():
    model = _Named()
    counts = synthetic.fill_model(model, seed=3, rank=0)
    assert counts == {"embed": 1, "norm": 3, "linear": 3, "router": 1, "lm_head": 1}
    p = {k: v.float() for k, v in model.params.items()}
    assert abs(p["model.embed_tokens.weight"].std().item() - synthetic.EMBED_STD) < 0.05
    assert abs(p["lm_head.weight"].std().item() - synthetic.LM_HEAD_STD) < 0.005
    assert abs(p["model.layers.0.mlp.experts.w13_weight"].std().item() - synthetic.LINEAR_STD) < 0.002
    router = synthetic.ROUTER_LOGIT_STD / 64 ** 0.5
    assert abs(p["model.layers.0.mlp.gate.weight"].std().item() - router) < 0.03
    norm = p["model.layers.0.input_layernorm.weight"]
    assert abs(norm.mean().item() - 1.0) < 0.05 and norm.std().item() > 0.05


def test_in_place_draw_depends_on_seed_name_and_the_rank_of_a_shard():
    first, again, other_seed, rank1 = _Named(), _Named(), _Named(), _Named()
    synthetic.fill_model(first, seed=3, rank=0)
    synthetic.fill_model(again, seed=3, rank=0)
    synthetic.fill_model(other_seed, seed=4, rank=0)
    synthetic.fill_model(rank1, seed=3, rank=1)
    name = "model.layers.0.self_attn.qkv_proj.weight"
    assert all(first.params[k].equal(again.params[k]) for k in first.params)
    assert not first.params[name].equal(other_seed.params[name])
    # split across TP ranks: each rank's shard its own; replicated: one copy on every rank
    for k in first.params:
        replicated = synthetic.param_kind(k, first.params[k].dim()) in synthetic.REPLICATED
        assert first.params[k].equal(rank1.params[k]) == replicated, k
    # two parameters of one shape get different draws
    same_shape = first.params["model.embed_tokens.weight"], first.params["lm_head.weight"]
    assert not (same_shape[0].float() / synthetic.EMBED_STD).equal(same_shape[1].float() / synthetic.LM_HEAD_STD)


def test_dummy_loader_hook_is_a_pass_through_without_the_seed(monkeypatch):
    monkeypatch.delenv(synthetic.SEED_ENV, raising=False)
    model = _Named()
    assert synthetic.fill_dummy_model(model, object()) is None
    assert all(not v.any() for v in model.params.values())
    monkeypatch.setenv(synthetic.SEED_ENV, "3")
    assert synthetic.fill_dummy_model(model, object()) is model
    reference = _Named()
    synthetic.fill_model(reference, seed=3)
    assert all(model.params[k].equal(reference.params[k]) for k in model.params)


def test_config_only_writes_what_the_dummy_loader_needs(tmp_path):
    from sglang.srt.configs.model_config import ModelConfig

    synthetic.main([str(tmp_path / "c"), "--shape", "qwen3-moe-tiny", "--config-only"])
    names = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert "config.json" in names and "tokenizer.json" in names
    assert not any(n.endswith(".safetensors") for n in names)
    assert ModelConfig(str(tmp_path / "c")).hf_config.architectures == ["Qwen3MoeForCausalLM"]


def test_prepare_reuses_a_folder_and_refuses_unknown_weights(tmp_path):
    folder = synthetic.prepare(tmp_path / "m", "qwen3-tiny", "in-place")
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert synthetic.prepare(folder, "qwen3-tiny", "files") == folder
    assert (folder / "config.json").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="in-place"):
        synthetic.prepare(tmp_path / "n", "qwen3-tiny", "random")


def _first_tokens(folder, grammar):
    """The tokens xgrammar (SGLang's grammar backend) allows first under ``grammar``: (kind, value)."""
    import transformers
    import xgrammar as xgr

    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok.get_vocab()))
    compiler, (kind, value) = xgr.GrammarCompiler(info), grammar
    compiled = {"json_schema": compiler.compile_json_schema, "regex": compiler.compile_regex,
                "ebnf": compiler.compile_grammar}[kind](value)
    mask = xgr.allocate_token_bitmask(1, info.vocab_size)
    xgr.GrammarMatcher(compiled).fill_next_token_bitmask(mask)
    return [tok.convert_ids_to_tokens(i) for i in
            xgr.testing.bitmask_to_bool_mask(mask, info.vocab_size)[0].nonzero().flatten().tolist()]


def test_every_grammar_of_the_request_corpus_can_start_on_the_synthetic_vocabulary(tmp_path, monkeypatch):
    """A server on a synthetic checkpoint can start each of the corpus's grammars: each allows a first token there
    (a JSON schema needs JSON's punctuation, which prompt words alone do not give: the control). The structural
    tag, in its legacy form, lets any text run until its trigger. (A word-level vocabulary still cannot spell
    every string a schema names, so the malformed check itself runs on SmolLM2.)"""
    from corun_sglang.tools import request_corpus

    synthetic.write_tokenizer(tmp_path / "tok", "qwen3-tiny")
    grammars = [(k, v) for k, v in request_corpus.GRAMMAR_VALUES.items() if k != "structural_tag"]
    assert [k for k, v in grammars if not _first_tokens(tmp_path / "tok", (k, v))] == []
    assert _first_tokens(tmp_path / "tok", ("json_schema", '{"type": "object"}')) == ["{"]
    monkeypatch.setattr(synthetic, "JSON_TOKENS", ())
    synthetic.write_tokenizer(tmp_path / "words", "qwen3-tiny")
    assert _first_tokens(tmp_path / "words", ("json_schema", '{"type": "object"}')) == []
