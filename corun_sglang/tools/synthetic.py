"""Seeded random-normal Qwen3 checkpoints for GPU tests and benchmarks.

SGLang's ``--load-format dummy`` fills every weight with uniform(-1e-3, 1e-3):
the logits come out nearly flat and batch-dependent numerics never reach the
tokens or logprobs, so a determinism test on such weights proves nothing.
These checkpoints draw linear weights from N(0, 0.02), embeddings from
N(0, 1), norms from 1 + 0.1 N(0, 1) and the LM head from N(0, 0.05), from a
seeded generator, so the same (shape, seed) gives the same files and logits
with real spread.

The same weights can also be drawn in place, with no files: write the config
and tokenizer alone (``--config-only``), start SGLang with ``--load-format
dummy`` and ``CORUN_SYNTHETIC_SEED=S`` in its environment, and every
parameter the dummy loader made is redrawn, on its own device, from the
distributions above with a generator seeded by (S, parameter name, TP rank);
the parameters Qwen3 models replicate across TP ranks (norms, the MoE router)
leave the rank out, so every rank holds the same copy.
Parameters are drawn elementwise i.i.d., so fused or reordered layouts
(``qkv_proj``, ``gate_up_proj``, stacked experts) get the same distribution as
the files would give; the values differ from the files' (the draw order does).
This is how a Qwen3-30B-A3B-shape model fits a host whose disk could not hold
its 61 GB of files.

Usage (on the GPU host): ``python -m corun_sglang.tools.synthetic DEST --shape qwen3-8b [--config-only]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from pathlib import Path
from corun_sglang.probes.launch import DRAW_LOG, SEED_ENV

logger = logging.getLogger(__name__)


SHAPES: dict[str, dict] = {
    # Qwen3-8B's architecture.
    "qwen3-8b": dict(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
    ),
    # A few layers of the same width as Qwen3-1.7B: quick to write and start.
    "qwen3-small": dict(
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
    ),
    # Qwen3-30B-A3B's architecture (about 61 GB in bf16).
    "qwen3-30b-a3b": dict(
        moe=True, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936,
        moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
    ),
    # Six layers of the same MoE width: the routing numerics at a size a test can write.
    "qwen3-moe-small": dict(
        moe=True, hidden_size=2048, intermediate_size=6144, num_hidden_layers=6,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936,
        moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
    ),
    "qwen3-moe-tiny": dict(
        moe=True, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=1024,
        moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
    ),
    # For CPU tests of this module.
    "qwen3-tiny": dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=1024,
    ),
}

COMMON = dict(
    architectures=["Qwen3ForCausalLM"],
    model_type="qwen3",
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    rope_scaling=None,
    torch_dtype="bfloat16",
    tie_word_embeddings=False,
    hidden_act="silu",
    attention_bias=False,
    attention_dropout=0.0,
    bos_token_id=151643,
    eos_token_id=151645,
    use_sliding_window=False,
    sliding_window=None,
)

LINEAR_STD, EMBED_STD, NORM_STD, LM_HEAD_STD = 0.02, 1.0, 0.1, 0.05


#: Router logits get this standard deviation for unit-scale inputs: top-k routing is
#: decisive but varies with the token, as in trained MoE models.
ROUTER_LOGIT_STD = 1.5

MOE_COMMON = dict(
    architectures=["Qwen3MoeForCausalLM"],
    model_type="qwen3_moe",
    norm_topk_prob=True,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    output_router_logits=False,
    router_aux_loss_coef=0.001,
)


def hf_config(shape: str) -> dict:
    spec = dict(SHAPES[shape])
    moe = spec.pop("moe", False)
    return {**COMMON, **(MOE_COMMON if moe else {}), **spec}


def _layer_shapes(cfg: dict, i: int) -> dict[str, tuple[tuple[int, ...], str]]:
    h, inter, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    p = f"model.layers.{i}."
    attn = {
        p + "input_layernorm.weight": ((h,), "norm"),
        p + "post_attention_layernorm.weight": ((h,), "norm"),
        p + "self_attn.q_proj.weight": ((q, h), "linear"),
        p + "self_attn.k_proj.weight": ((kv, h), "linear"),
        p + "self_attn.v_proj.weight": ((kv, h), "linear"),
        p + "self_attn.o_proj.weight": ((h, q), "linear"),
        p + "self_attn.q_norm.weight": ((hd,), "norm"),
        p + "self_attn.k_norm.weight": ((hd,), "norm"),
    }
    if "num_experts" not in cfg:
        return {
            **attn,
            p + "mlp.gate_proj.weight": ((inter, h), "linear"),
            p + "mlp.up_proj.weight": ((inter, h), "linear"),
            p + "mlp.down_proj.weight": ((h, inter), "linear"),
        }
    e_inter = cfg["moe_intermediate_size"]
    experts = {p + "mlp.gate.weight": ((cfg["num_experts"], h), "router")}
    for j in range(cfg["num_experts"]):
        e = f"{p}mlp.experts.{j}."
        experts[e + "gate_proj.weight"] = ((e_inter, h), "linear")
        experts[e + "up_proj.weight"] = ((e_inter, h), "linear")
        experts[e + "down_proj.weight"] = ((h, e_inter), "linear")
    return {**attn, **experts}


def _draw(shape, kind, gen, device, dtype=None):
    import torch

    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    if kind == "norm":
        x = 1.0 + NORM_STD * x
    elif kind == "zero":
        x.zero_()
    else:
        std = {"linear": LINEAR_STD, "embed": EMBED_STD, "lm_head": LM_HEAD_STD,
               "router": ROUTER_LOGIT_STD / shape[-1] ** 0.5}[kind]
        x = x * std
    return x.to(dtype or torch.bfloat16)


def param_kind(name: str, ndim: int) -> str:
    """The distribution of an SGLang Qwen3 / Qwen3-MoE parameter, by its name in the loaded model."""
    if "embed_tokens" in name:
        return "embed"
    if name.startswith("lm_head."):
        return "lm_head"
    if name.endswith("norm.weight"):
        return "norm"
    if name.endswith("mlp.gate.weight"):
        return "router"
    return "linear" if ndim >= 2 else "zero"


#: Kinds of parameter that TP replicates in Qwen3 models (the rest are split across ranks).
REPLICATED = frozenset({"norm", "router", "zero"})


def _param_seed(seed: int, name: str, rank: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{rank}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _tp_rank() -> int:
    try:
        from sglang.srt.distributed import get_tensor_model_parallel_rank

        return get_tensor_model_parallel_rank()
    except (ImportError, AssertionError, AttributeError):
        return 0


def fill_model(model, seed: int, rank: int | None = None) -> dict[str, int]:
    """Redraw every floating parameter of ``model`` in place; returns the count per kind.

    A parameter's draw depends only on (seed, its name, its shape) and, for a
    split one, the TP rank (default: this process's): it is the same on every
    start, and replicated parameters are equal on every rank while the shards
    of a split one differ.
    """
    import torch

    rank = _tp_rank() if rank is None else rank
    counts: dict[str, int] = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not torch.is_floating_point(param):
                continue
            kind = param_kind(name, param.dim())
            owner = 0 if kind in REPLICATED else rank
            gen = torch.Generator(device=param.device).manual_seed(_param_seed(seed, name, owner))
            param.copy_(_draw(tuple(param.shape), kind, gen, param.device, param.dtype))
            counts[kind] = counts.get(kind, 0) + 1
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return counts


def fill_dummy_model(model, *args, **kwargs):
    """AFTER hook on SGLang's ``DummyModelLoader.load_model``: a pass-through unless ``SEED_ENV`` is set."""
    seed = os.environ.get(SEED_ENV)
    if seed is None:
        return None
    counts = fill_model(model, int(seed))
    logger.info("%s: seed %s, tensors %s", DRAW_LOG, seed, counts)
    return model


def write_checkpoint(dest: str | Path, shape: str = "qwen3-small", seed: int = 0, device: str = "cuda") -> Path:
    """Write ``config.json`` and safetensors shards (one per layer) for ``shape`` into ``dest``."""
    import torch
    from safetensors.torch import save_file

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cfg = hf_config(shape)
    gen = torch.Generator(device=device).manual_seed(seed)
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    shards: list[dict[str, tuple[tuple[int, ...], str]]] = [
        {"model.embed_tokens.weight": ((v, h), "embed")}
    ]
    shards += [_layer_shapes(cfg, i) for i in range(cfg["num_hidden_layers"])]
    shards.append({"model.norm.weight": ((h,), "norm"), "lm_head.weight": ((v, h), "lm_head")})
    weight_map = {}
    for k, shard in enumerate(shards):
        name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {key: _draw(s, kind, gen, device).cpu() for key, (s, kind) in shard.items()}
        save_file(tensors, str(dest / name), metadata={"format": "pt"})
        weight_map.update({key: name for key in tensors})
    (dest / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1)
    )
    write_config(dest, shape)
    write_tokenizer(dest, shape)
    return dest


WEIGHTS = ("in-place", "files")


def prepare(dest: str | Path, shape: str, weights: str = "in-place", seed: int = 0) -> Path:
    """A model folder for ``shape`` at ``dest``, reused when its config is already there.

    ``in-place``: config and tokenizer only; ``launch.Server`` serves such a
    folder with the weights drawn inside SGLang (``SEED_ENV``). ``files``: the
    whole checkpoint, written on the GPU.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, not {weights!r}")
    dest = Path(dest)
    if (dest / "config.json").exists():
        if not (dest / "tokenizer.json").exists():
            write_tokenizer(dest, shape)
        return dest
    if weights == "files":
        return write_checkpoint(dest, shape, seed=seed)
    write_config(dest, shape)
    write_tokenizer(dest, shape)
    return dest


def write_config(dest: str | Path, shape: str) -> Path:
    """Write only ``config.json`` and ``generation_config.json`` for ``shape`` (no weights)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cfg = hf_config(shape)
    (dest / "config.json").write_text(json.dumps(cfg, indent=1))
    (dest / "generation_config.json").write_text(
        json.dumps({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]})
    )
    return dest


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


#: JSON's punctuation, digits and literals, each a token of the synthetic vocabulary.
JSON_TOKENS = ("{", "}", "[", "]", ":", ",", '"', *"0123456789", "-", ".", "true", "false", "null")


def write_tokenizer(dest: str | Path, shape: str) -> Path:
    """A word-level tokenizer covering the shape's vocabulary, for the text and chat endpoints.

    Id 0 is ``<unk>``, then ``generate.WORDS`` (the words of its prompts), then ``JSON_TOKENS`` (so that every
    JSON schema has an allowed first token and a way to close), then ``w<id>`` for every other id;
    ``<|endoftext|>``, ``<|im_start|>`` and ``<|im_end|>`` sit at the config's
    bos id, bos + 1 and eos id (the last three ids when those fall outside the
    vocabulary). Text is split on whitespace; decoding joins with spaces.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from corun_sglang.probes.generate import WORDS

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cfg = hf_config(shape)
    vocab = cfg["vocab_size"]
    bos, eos = cfg["bos_token_id"], cfg["eos_token_id"]
    if eos >= vocab:
        bos, eos = vocab - 3, vocab - 1
    special = {bos: "<|endoftext|>", bos + 1: "<|im_start|>", eos: "<|im_end|>"}
    words = (*WORDS, *JSON_TOKENS)
    names = {0: "<unk>", **{1 + i: w for i, w in enumerate(words)}, **special}
    table = {names.get(i, f"w{i}"): i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(vocab=table, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok.add_special_tokens(list(special.values()))
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": "<unk>", "model_max_length": cfg["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }, indent=1))
    return dest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--config-only", action="store_true",
                        help=f"config and tokenizer only, for --load-format dummy with {SEED_ENV} set")
    args = parser.parse_args(argv)
    if args.config_only:
        print(prepare(args.dest, args.shape, "in-place"))
    else:
        print(write_checkpoint(args.dest, args.shape, args.seed, args.device))


if __name__ == "__main__":
    main()
