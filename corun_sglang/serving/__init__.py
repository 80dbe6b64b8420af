"""Layer 4, serving: the SGLang glue of a ``--corun`` server. ``hooks`` names every SGLang target and the adapter
it installs (``adapters``, one module per concern), ``server_args`` and ``pipeline`` build the configuration, and
the sampler, bindings, startup check, patch series and metrics complete it. Imports ``core``, ``records`` and
``probes``; never ``tools`` or ``commands``."""
