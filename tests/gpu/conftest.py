"""GPU tier: skipped where CUDA is absent; fixtures for a real server on a synthetic checkpoint.

Environment:
- ``CORUN_CHECKPOINT``: a model folder, used as it is when it holds a config
  (default: one made here with ``corun_sglang.tools.synthetic``, shape ``CORUN_SHAPE``,
  default qwen3-small);
- ``CORUN_WEIGHTS``: how such a synthetic folder gets its weights: ``in-place``
  (default: config only, the server draws them, see ``corun_sglang.probes.launch``)
  or ``files`` (a full safetensors checkpoint);
- ``CORUN_RESULTS``: a folder where tests write their measurements as JSON;
- ``CORUN_STATIC_GB``: static GPU memory (GiB) of every server a test starts without
  naming its own (default: SGLang's ``--mem-fraction-static``), so tests can share a GPU;
- ``CORUN_CALIBRATE``: the ``--corun-calibrate`` of every ``--corun`` server a test starts without
  naming one (default ``off``: a test sees the configuration it asks for; ``auto`` serves the
  calibrated default, calibrating on the first start).
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
    from corun_sglang.tools import synthetic

    given = os.environ.get("CORUN_CHECKPOINT")
    shape = os.environ.get("CORUN_SHAPE", "qwen3-small")
    dest = Path(given) if given else tmp_path_factory.mktemp("ckpt")
    return str(synthetic.prepare(dest, shape, os.environ.get("CORUN_WEIGHTS", "in-place")))


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

    from corun_sglang.probes.launch import Server

    def start(model_path: str, *args: str, name: str = "server", text: bool = False,
              static_gb: float | None = None) -> Server:
        """``text``: serve text endpoints with the checkpoint's tokenizer (else token ids only);
        ``static_gb``: static GPU memory for this server (see ``corun_sglang.probes.launch``)."""
        if "--corun" in args and not any(a.startswith("--corun-calibrate") for a in args):
            args = (*args, "--corun-calibrate", os.environ.get("CORUN_CALIBRATE", "off"))
        folder = Path(os.environ.get("CORUN_RESULTS") or tmp_path_factory.mktemp("logs"))
        folder.mkdir(parents=True, exist_ok=True)
        if static_gb is None and os.environ.get("CORUN_STATIC_GB"):
            static_gb = float(os.environ["CORUN_STATIC_GB"])
        server = Server(model_path, list(args), folder / f"{name}.log", skip_tokenizer_init=not text,
                        static_gb=static_gb)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
