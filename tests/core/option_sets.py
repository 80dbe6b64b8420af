"""SGLang's own option set as a user hands it over, for the tests of what --corun decides about it."""

import dataclasses
import types

from corun_sglang.core.options import defaults_of


def user_args(**given):
    """Options as a user hands them to SGLang: the ServerArgs defaults plus ``given``."""
    from sglang.srt.server_args import ServerArgs

    base = ServerArgs.__mro__[0]
    while "corun" in {f.name for f in dataclasses.fields(base)}:
        base = base.__mro__[1]
    values = defaults_of(base)
    unknown = set(given) - set(values)
    assert not unknown, f"not SGLang options: {unknown}"
    return types.SimpleNamespace(**{**values, **given})
