"""A contract stop at run time: its one log line and what in-flight requests are told.

A ``CorunContractError`` in a running scheduler stops the server: serving on would break
the contract. ``adapters.operations.event_loop`` answers every request the scheduler holds with
``STATUS`` and ``line()``, logs ``line()``, waits ``ANSWER_GRACE_S`` for the HTTP server to
send those answers, and hands the error to SGLang's scheduler-crash path, which logs the
traceback and has the server kill its process tree (exit status 137, SIGKILL).
"""

from __future__ import annotations

from http import HTTPStatus

class CorunContractError(RuntimeError):
    """SGLang was about to do something that breaks the CoRun contract; this is a bug, never skipped."""


#: What a log search for contract stops matches.
PREFIX = "corun contract stop"

#: The status in-flight requests get: the server is going away; a retry once it is back is answered
#: with the same tokens (seeds derive from the request and ``--random-seed``, not from the process).
STATUS = HTTPStatus.SERVICE_UNAVAILABLE

#: Seconds the stopping scheduler leaves the HTTP server to answer in-flight requests before the
#: process tree is killed.
ANSWER_GRACE_S = 2.0


def line(error: BaseException) -> str:
    """The cause of a stop on one line: ``corun contract stop: <message>`` (whitespace runs collapsed)."""
    message = " ".join(str(error).split()) or type(error).__name__
    return f"{PREFIX}: {message}"


def client_message(error: BaseException) -> str:
    """What an in-flight request is answered with."""
    return f"{line(error)}. The server is stopping; retry once it is back"
