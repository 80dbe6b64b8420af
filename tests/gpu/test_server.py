"""A ``--corun`` server on a synthetic Qwen3 checkpoint: starts, logs its shape, serves, reports."""

import re

import httpx
import pytest

pytestmark = pytest.mark.e2e


def test_corun_server_starts_logs_config_and_serves(launch, checkpoint, record):
    server = launch(checkpoint, "--corun", name="corun-server")
    log = server.log_text()
    config_lines = [line for line in log.splitlines() if "corun: decode graph" in line]
    assert config_lines, log[-4000:]
    assert "bs=[256]" in config_lines[0]

    prompt = list(range(100, 164))
    reply = httpx.post(
        server.url + "/generate",
        json={"input_ids": prompt, "sampling_params": {"max_new_tokens": 16, "temperature": 0}},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    out = reply.json()
    assert len(out["output_ids"]) == 16

    info = httpx.get(server.url + "/server_info", timeout=30).json()
    assert info["corun"] is True
    assert info["max_running_requests"] == 256
    assert info["cuda_graph_config"]["decode"]["bs"] == [256]
    assert info["enable_deterministic_inference"] is False

    captures = [l for l in log.splitlines() if re.search(r"[Cc]aptur", l)]
    record(
        "foundation_server",
        {
            "command": server.command,
            "config_line": config_lines[0],
            "capture_lines": captures[-10:],
            "generate_output_ids": out["output_ids"],
            "server_info_subset": {
                k: info.get(k)
                for k in ("corun", "max_running_requests", "cuda_graph_config", "attention_backend",
                          "prefill_max_requests", "disable_radix_cache", "random_seed", "version")
            },
        },
    )
