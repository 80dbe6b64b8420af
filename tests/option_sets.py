"""SGLang's own option set as a user hands it over, for the tests of what --corun decides about it."""

import dataclasses
import types


def user_args(**given):
    """Options as a user hands them to SGLang: the ServerArgs defaults plus ``given``."""
    from sglang.srt.server_args import ServerArgs

    base = ServerArgs.__mro__[0]
    while "corun" in {f.name for f in dataclasses.fields(base)}:
        base = base.__mro__[1]
    values = {}
    for f in dataclasses.fields(base):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    unknown = set(given) - set(values)
    assert not unknown, f"not SGLang options: {unknown}"
    values.update(given)
    return types.SimpleNamespace(**values)
