"""Layer 3, probes: servers started to verify (a server subprocess, its prompts, a request alone and among
co-runners compared bit for bit) and calibration, which runs them on a ``--corun`` server's first start. Imports
``core`` and ``records``."""
