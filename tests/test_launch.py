"""``launch``: a server that cannot start is reported with its log, and leaves nothing running."""

import pytest

from corun_sglang.launch import Server


def test_a_refused_start_raises_with_the_log(tiny_model, tmp_path):
    log = tmp_path / "server.log"
    with pytest.raises(RuntimeError, match="enable-mixed-chunk"):
        Server(tiny_model, ["--corun", "--enable-mixed-chunk", "--device", "cuda"], log, timeout=300)
    assert "CorunConfigError" in log.read_text()
