"""Serving benchmarks of ``--corun`` against default SGLang and its deterministic mode.

Each module runs as ``python -m bench.<module>`` from the repository root; ``bench/slices.sh`` runs
the named slices of the matrix and ``python -m bench.report`` aggregates their rows.
"""
