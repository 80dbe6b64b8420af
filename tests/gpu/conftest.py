"""GPU tier: skipped where CUDA is absent; fixtures for a real server on a synthetic checkpoint.

Environment:
- ``CORUN_CHECKPOINT``: an existing checkpoint folder (default: one written
  here with ``corun_sglang.synthetic``, shape ``CORUN_SHAPE``, default qwen3-small);
- ``CORUN_RESULTS``: a folder where tests write their measurements as JSON.
"""

import json
import os
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


@pytest.fixture(scope="session")
def launch(tmp_path_factory):
    """Start servers on demand; all are stopped at the end of the session."""
    started = []

    from corun_sglang.launch import Server

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
