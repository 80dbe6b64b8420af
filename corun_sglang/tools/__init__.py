"""Layer 5, tools for tests, benchmarks and the demo: seeded random-normal checkpoints (``synthetic``), real models
shipped as packages (``models``), evidence from suite runs (``evidence``, ``loads``) and the malformed-request
corpus. Imports ``core``, ``records`` and ``probes``; no runtime layer imports it (the dummy loader's synthetic
draw is registered by name, only where ``probes.launch.SEED_ENV`` is set)."""
