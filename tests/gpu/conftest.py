"""GPU tier: skipped where CUDA is absent; fixtures for a real server on a synthetic checkpoint.

Environment:
- ``CORUN_CHECKPOINT``: an existing checkpoint folder (default: one written
  here with ``corun_sglang.synthetic``, shape ``CORUN_SHAPE``, default qwen3-small);
- ``CORUN_RESULTS``: a folder where tests write their measurements as JSON.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:
    HAS_CUDA = False


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.gpu)
            if not HAS_CUDA:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    from corun_sglang import synthetic

    given = os.environ.get("CORUN_CHECKPOINT")
    shape = os.environ.get("CORUN_SHAPE", "qwen3-small")
    if given and (Path(given) / "config.json").exists():
        if not (Path(given) / "tokenizer.json").exists():
            synthetic.write_tokenizer(given, shape)
        return given
    dest = Path(given) if given else tmp_path_factory.mktemp("ckpt")
    return str(synthetic.write_checkpoint(dest, shape, seed=0))


@pytest.fixture(scope="session")
def record():
    """``record(name, data)`` writes a test's measurements to ``$CORUN_RESULTS/<name>.json``."""

    def write(name: str, data: dict) -> None:
        folder = os.environ.get("CORUN_RESULTS")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))

    return write


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


@pytest.fixture(scope="session")
def launch(tmp_path_factory):
    """Start servers on demand; all are stopped at the end of the session."""
    started = []

    def start(model_path: str, *args: str, name: str = "server", text: bool = False) -> Server:
        """``text``: serve text endpoints with the checkpoint's tokenizer (else token ids only)."""
        folder = Path(os.environ.get("CORUN_RESULTS") or tmp_path_factory.mktemp("logs"))
        folder.mkdir(parents=True, exist_ok=True)
        server = Server(model_path, list(args), folder / f"{name}.log", skip_tokenizer_init=not text)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
