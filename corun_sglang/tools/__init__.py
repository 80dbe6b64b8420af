"""Tooling for tests, benchmarks and the verification probes: seeded random-normal checkpoints
(``synthetic``) and a server subprocess (``launch``). Nothing here runs inside a ``--corun`` server,
except the dummy loader's synthetic draw, which is registered only where ``synthetic.SEED_ENV`` is set."""
