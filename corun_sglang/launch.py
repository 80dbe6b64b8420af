"""Start ``python -m sglang.launch_server`` as a subprocess and wait until it serves (GPU tests, benchmarks).

The server runs in its own session, so ``stop()`` ends it and every process it
started, freeing the GPU.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m sglang.launch_server`` in a subprocess, logging to a file."""

    def __init__(self, model_path: str, args: list[str], log: Path, timeout: float = 600,
                 skip_tokenizer_init: bool = True):
        import httpx

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [
            sys.executable, "-m", "sglang.launch_server", "--model-path", model_path,
            "--port", str(self.port), *(["--skip-tokenizer-init"] if skip_tokenizer_init else []), *args,
        ]
        self.log = log
        self._out = open(log, "w")
        self.proc = subprocess.Popen(
            self.command, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_text()[-4000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        self.stop()
        raise TimeoutError(f"server not healthy after {timeout}s:\n{self.log_text()[-4000:]}")

    def log_text(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """Stop the server and every process it started (its session), freeing the GPU."""
        import signal

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        if not self._out.closed:
            self._out.close()
