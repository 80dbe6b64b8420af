"""A ``--corun`` refusal as a user of SGLang's launchers sees it: one line per problem, no traceback.

``install()`` runs from the plugin's ``register()``, so in every process that
loads SGLang's plugins, before any launcher resolves its options. It chains
``sys.excepthook``: an uncaught ``config.CorunConfigError`` or
``startup.CorunStartupError`` (``python -m sglang.launch_server --corun ...``,
``sglang serve``) prints its headline and one line per problem to stderr, and
the process exits with status 1, as for any uncaught exception. Every other
exception goes to the hook installed before, unchanged. A library caller
(``sgl.Engine(..., corun=True)``) still gets the exception: an except hook
sees only what nothing caught.
"""

from __future__ import annotations

import sys

_previous = None  # the except hook ``install()`` found, which every other exception goes to
_refusals: tuple[type[BaseException], ...] = ()


def refusals() -> tuple[type[BaseException], ...]:
    from corun_sglang.core.config import CorunConfigError
    from corun_sglang.serving.startup import CorunStartupError

    return CorunConfigError, CorunStartupError


def render(exc: BaseException) -> str:
    """The refusal's headline, then each problem on one line of its own."""
    headline = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    problems = [" ".join(str(p).split()) for p in getattr(exc, "problems", ())]
    return "\n".join([headline, *(f"  - {p}" for p in problems)])


def _excepthook(exc_type, exc, tb) -> None:
    if issubclass(exc_type, _refusals):
        print(render(exc), file=sys.stderr, flush=True)
        return
    (_previous or sys.__excepthook__)(exc_type, exc, tb)


def install() -> None:
    """Chain ``sys.excepthook`` so an uncaught refusal prints as ``render`` (idempotent)."""
    global _previous, _refusals
    if sys.excepthook is _excepthook:
        return
    _refusals = refusals()
    _previous = sys.excepthook
    sys.excepthook = _excepthook
