"""``steps``: the decode graph a step replays, its padding, and the kind of each prefill batch."""

import pytest

from corun_sglang.core import steps
from corun_sglang.core import tiers


def test_a_decode_step_replays_the_graph_sglangs_runner_pads_it_to():
    from sglang.srt.model_executor.runner.base_cuda_graph_runner import BaseCudaGraphRunner

    sizes = tiers.capture_sizes([96, 64, 300], 256)
    assert sizes == [64, 96, 256]
    for batch in range(1, 257):
        assert steps.graph_size(batch, sizes) == BaseCudaGraphRunner._pad_to_bucket(batch, sizes)
    assert steps.graph_size(257, sizes) is None


PACK = (256, 33)


@pytest.mark.parametrize("requests,pack,kind", [
    ([(100, 0, 100)], None, steps.ISOLATED),  # one fresh whole prompt
    ([(100, 0, 100)], PACK, steps.PACKED),  # padded to the pack
    ([(300, 0, 300)], PACK, steps.ISOLATED),  # longer than the pack: at its own size
    ([(20, 0, 20)], PACK, steps.ISOLATED),  # shorter than the shortest packable prompt
    ([(40, 0, 40), (100, 0, 100)], PACK, steps.PACKED),  # several prompts
    ([(5000, 0, 4096)], None, steps.CHUNK),  # the first chunk of a longer prompt
    ([(5000, 4096, 904)], None, steps.CHUNK),  # its last chunk
    ([(5000, 4096, 904)], (1024, 1), steps.CHUNK),  # a last chunk within the pack's length is still a chunk
])
def test_each_prefill_batch_has_one_kind(requests, pack, kind):
    assert steps.prefill_kind(requests, pack) == kind


def test_a_tally_counts_until_drained():
    tally = steps.Tally()
    sizes = [64, 256]
    for batch in (1, 64, 65, 256, 300):
        tally.decode(batch, sizes)
    tally.prefill(steps.CHUNK)
    tally.prefill(steps.CHUNK)
    tally.prefill(steps.ISOLATED)
    got = tally.drain()
    assert got.decode_steps == {64: 2, 256: 2}
    assert got.padded_slots == 63 + 0 + 191 + 0  # 300 runs no graph: not counted
    assert got.prefills == {steps.CHUNK: 2, steps.ISOLATED: 1}
    assert tally.drain() == steps.Tally()
