"""Entry point of the ``sglang.srt.plugins`` group.

SGLang calls ``register()`` in every process that loads plugins (the server,
``sgl.Engine`` and each scheduler subprocess) and applies the registered
hooks right after. Registering is all it does: every hook is a pass-through
until a server runs with ``--corun``, and the except hook ``refusal.install``
chains acts only on a ``--corun`` refusal nothing caught.
"""

from corun_sglang.serving import hooks, refusal


def register() -> None:
    hooks.register()
    refusal.install()
