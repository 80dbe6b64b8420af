"""``stops``: a contract stop's one log line, and the container that comes back after it."""

from pathlib import Path

import pytest
import yaml

from corun_sglang.core import stops
from corun_sglang.core.stops import CorunContractError

ROOT = Path(__file__).resolve().parents[2]


def test_the_cause_is_one_greppable_line():
    error = CorunContractError("decode retraction was about to run\n  for a batch of 3 requests.\tPlease report it")
    assert stops.line(error) == ("corun contract stop: decode retraction was about to run for a batch of 3 "
                                 "requests. Please report it")


def test_an_empty_message_still_names_the_cause():
    assert stops.line(CorunContractError()) == "corun contract stop: CorunContractError"


def test_clients_are_told_the_cause_and_to_retry():
    message = stops.client_message(CorunContractError("a decode step was about to run eagerly"))
    assert message.startswith("corun contract stop: a decode step was about to run eagerly.")
    assert "retry" in message and "\n" not in message
    assert stops.STATUS == 503


@pytest.fixture(scope="module")
def service():
    return yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())["services"]["corun-sglang"]


def test_compose_restarts_the_server_whatever_its_exit_status(service):
    assert service["restart"] in ("unless-stopped", "always")
    assert service["init"] is True  # the server is not PID 1, so SGLang's stop kills it (status 137)


def test_compose_checks_health(service):
    check = service["healthcheck"]
    assert check["test"][0] == "CMD" and check["test"][-1].endswith(":30000/health")
    assert set(check) >= {"interval", "timeout", "start_period", "retries"}
