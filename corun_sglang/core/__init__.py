"""Layer 1, pure decisions: what ``--corun`` sets, refuses and accepts, and every rule it serves by, as functions
over plain values. Nothing here imports SGLang's runtime, starts a process or changes its arguments; it imports
nothing of corun-sglang outside this folder."""
