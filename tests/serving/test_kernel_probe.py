"""``kernel_probe``: which FlashInfer prefill kernel a fresh prompt's attention runs on."""

from corun_sglang.core import packing
from corun_sglang.serving import kernel_probe


def test_on_fa3_every_prompt_packs_and_only_sglangs_ragged_fa3_path_is_fa3():
    assert packing.shortest(32, 8, packing.FA3) == 1 and packing.shortest(32, 8, packing.FA2) == 17
    assert kernel_probe.ragged_kernel(fa3_here=True, paged=False, sm100=False) == packing.FA3
    for paged, sm100, here in [(True, False, True), (False, True, True), (False, False, False)]:
        assert kernel_probe.ragged_kernel(fa3_here=here, paged=paged, sm100=sm100) == packing.FA2


def test_the_paged_path_and_a_machine_without_cuda_get_the_fa2_rule():
    import torch

    assert kernel_probe.prefill_kernel(128, torch.bfloat16, paged=True) == packing.FA2
    if not torch.cuda.is_available():
        assert kernel_probe.prefill_kernel(128, torch.bfloat16, paged=False) == packing.FA2


def test_a_plan_names_the_ragged_wrappers_kernel_or_the_paged_fa2():
    assert kernel_probe.planned(True, packing.FA3) == packing.FA3
    assert kernel_probe.planned(True, None) is None  # the ragged wrapper before its first plan
    assert kernel_probe.planned(False, packing.FA3) == "paged fa2"
