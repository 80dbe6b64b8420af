"""``refusal``: an uncaught ``--corun`` refusal prints one line per problem; everything else is untouched.

The launchers themselves (``python -m sglang.launch_server``, ``sglang serve``) are run in
tests/test_cli.py.
"""

import sys

import pytest

from corun_sglang.serving import refusal
from corun_sglang.core.config import CorunConfigError
from corun_sglang.serving.startup import CorunStartupError


@pytest.fixture
def hooked(monkeypatch):
    """``sys.excepthook`` chained by ``refusal.install`` over a recording hook; both restored after."""
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *exc_info: seen.append(exc_info))
    monkeypatch.setattr(refusal, "_previous", refusal._previous)
    refusal.install()
    return seen


def _raise(exc):
    try:
        raise exc
    except BaseException as caught:
        return type(caught), caught, caught.__traceback__


def test_the_plugin_installs_the_hook(sglang_plugins):
    assert sys.excepthook is refusal._excepthook


@pytest.mark.parametrize("error", [CorunConfigError, CorunStartupError])
def test_a_refusal_prints_one_line_per_problem(hooked, capsys, error):
    problems = ["--enable-mixed-chunk: shapes follow arrivals. Fix: remove it",
                "a problem whose text\nspans two lines. Fix: none needed"]
    sys.excepthook(*_raise(error(problems)))
    err = capsys.readouterr().err.splitlines()
    assert err == [str(error(problems)).splitlines()[0],
                   "  - --enable-mixed-chunk: shapes follow arrivals. Fix: remove it",
                   "  - a problem whose text spans two lines. Fix: none needed"]
    assert hooked == []


def test_every_other_exception_goes_to_the_previous_hook(hooked, capsys):
    exc_info = _raise(RuntimeError("not a refusal"))
    sys.excepthook(*exc_info)
    assert hooked == [exc_info] and capsys.readouterr().err == ""


def test_install_is_idempotent(hooked, capsys):
    refusal.install()  # a second install must not chain the hook to itself
    exc_info = _raise(KeyError("x"))
    sys.excepthook(*exc_info)
    assert hooked == [exc_info]
