"""Layer 6, commands: ``corun-sglang`` and its verbs (``cli``): ``doctor``, ``demo``, ``verify`` and the probes'
own commands. Imports every layer below."""
