"""``weights``: the digest of a model's loaded weights follows every bit, and nothing else."""

import torch

from corun_sglang.serving import weights


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.Linear(33, 5, bias=False)).to(torch.bfloat16)


def test_equal_weights_give_equal_digests():
    assert weights.of_model(_model()) == weights.of_model(_model())
    assert weights.of_model(_model()) != weights.of_model(_model(seed=1))


def test_one_flipped_bit_changes_the_digest():
    """A fine-tune of the same architecture: the same names, shapes and dtypes, other bits."""
    base, tuned = _model(), _model()
    with torch.no_grad():
        tuned[1].weight.view(torch.int16)[2, 7] ^= 1  # the lowest mantissa bit of one weight
    assert weights.of_model(tuned) != weights.of_model(base)


def test_swapped_words_and_tail_bytes_change_the_checksum():
    t = torch.arange(40, dtype=torch.int64)
    swapped = t.clone()
    swapped[[3, 30]] = swapped[[30, 3]]
    assert weights.checksum(swapped) != weights.checksum(t)
    odd = torch.arange(13, dtype=torch.uint8)  # one whole word and five tail bytes
    flipped = odd.clone()
    flipped[12] ^= 0x80
    assert weights.checksum(flipped) != weights.checksum(odd)


def test_the_checksum_reads_bits_chunk_by_chunk_alike(monkeypatch):
    t = torch.randn(1000, dtype=torch.float32)
    whole = weights.checksum(t)
    monkeypatch.setattr(weights, "CHUNK", 7)
    assert weights.checksum(t) == whole


def test_names_dtypes_and_shapes_are_part_of_the_digest():
    t = torch.zeros(4, 4, dtype=torch.bfloat16)
    base = weights.digest([("w", t)])
    assert weights.digest([("v", t)]) != base
    assert weights.digest([("w", t.view(16))]) != base
    assert weights.digest([("w", t.view(torch.float16))]) != base
