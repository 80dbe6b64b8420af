"""Tests of ``corun_sglang.serving.adapters``, one module per adapter module; a package, so that their names may
repeat those of tests/ (tests/test_seeds.py tests ``corun_sglang.core.seeds``, test_seeds.py here its adapter)."""
