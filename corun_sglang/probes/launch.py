"""Start ``python -m sglang.launch_server`` as a subprocess and wait until it serves (GPU tests, benchmarks).

The server runs in its own session, so ``stop()`` ends it and every process it
started, freeing the GPU. A model folder with a config but no weight files
(``synthetic.prepare(..., weights="in-place")``) is served with
``--load-format dummy`` and ``SEED_ENV`` set (default 0), so the
server draws seeded random-normal weights itself; ``Server`` then checks that
it logged the draw.

SGLang sizes its static memory (weights + KV pool) as ``--mem-fraction-static``
times the GPU memory free when it starts, so servers started one after
another on one GPU with the same fraction get ever smaller pools.
``static_gb`` asks for a size instead: the fraction is worked out from the
free memory at launch. Side-by-side arms that must have identical pools also
pass the same ``--max-total-tokens``.

A server appends to its log: servers started one after another with one log
path leave all their output there, in order, and ``log_text()`` is this
server's part alone.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")

#: Environment variable: when set (to an integer seed), SGLang's dummy loader redraws the weights it made from
#: ``tools.synthetic``'s distributions (a hook registered only where it is set).
SEED_ENV = "CORUN_SYNTHETIC_SEED"
#: What each process logs once it has drawn them.
DRAW_LOG = "corun-sglang synthetic weights"


def weightless(model_path: str) -> bool:
    """A local model folder with ``config.json`` and no weight files."""
    folder = Path(model_path)
    return (folder / "config.json").exists() and not any(
        p.name.endswith(WEIGHT_SUFFIXES) for p in folder.iterdir()
    )


def expects_synthetic_draw(command: list[str], environ) -> bool:
    """Whether a server started with ``command`` in ``environ`` must log a synthetic-weight draw."""
    dummy = any(a == "--load-format=dummy" or (a == "--load-format" and b == "dummy")
                for a, b in zip(command, command[1:] + [""]))
    return dummy and SEED_ENV in environ


def free_gpu_gb() -> float:
    """Free memory of the fullest visible GPU, in GiB (``nvidia-smi``)."""
    cmd = ["nvidia-smi", "--query-gpu=index,memory.free", "--format=csv,noheader,nounits"]
    rows = [line.split(",") for line in subprocess.check_output(cmd, text=True).strip().splitlines()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    wanted = {v.strip() for v in visible.split(",")} if visible else None
    free = [float(mib) for index, mib in rows if wanted is None or index.strip() in wanted]
    return min(free or [float(mib) for _, mib in rows]) / 1024  # UUIDs in CUDA_VISIBLE_DEVICES: all GPUs


#: The most of the free GPU memory a server's static size may take (the rest: activations, graphs).
STATIC_SHARE = 0.95


def settled_free_gpu_gb(need_gb: float, timeout: float = 180, poll: float = 2.0) -> float:
    """``free_gpu_gb()`` once it reaches ``need_gb`` and holds still between two reads (a server just
    stopped frees its memory some seconds after its processes exit), or its last read after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = free_gpu_gb()
    while time.monotonic() < deadline:
        time.sleep(poll)
        now = free_gpu_gb()
        if now >= need_gb and abs(now - last) < 0.5:
            return now
        last = now
    return last


def static_fraction(static_gb: float, free_gb: float) -> float:
    """``--mem-fraction-static`` that gives ``static_gb`` when ``free_gb`` is free at start."""
    if static_gb >= STATIC_SHARE * free_gb:
        raise RuntimeError(f"{static_gb} GiB of static memory asked for, {free_gb:.1f} GiB free")
    return round(static_gb / free_gb, 4)


class Server:
    """``python -m sglang.launch_server`` in a subprocess, appending to a log file."""

    def __init__(self, model_path: str, args: list[str], log: Path, timeout: float = 600,
                 skip_tokenizer_init: bool = True, static_gb: float | None = None,
                 env: Mapping[str, str] | None = None, port: int | None = None):
        import httpx

        if static_gb is not None and "--mem-fraction-static" not in args:
            free = settled_free_gpu_gb(static_gb / STATIC_SHARE)
            args = [*args, "--mem-fraction-static", str(static_fraction(static_gb, free))]
        self.port = port or _free_port()  # a given port: a server restarted where a router expects it
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **(env or {})}  # the server's processes inherit it
        if weightless(model_path) and "--load-format" not in args:
            args = [*args, "--load-format", "dummy"]
            self.env.setdefault(SEED_ENV, "0")
        self.command = [
            sys.executable, "-m", "sglang.launch_server", "--model-path", model_path,
            "--port", str(self.port), *(["--skip-tokenizer-init"] if skip_tokenizer_init else []), *args,
        ]
        self.log = log
        self._out = open(log, "a")
        self._log_start = self._out.tell()
        self.proc = subprocess.Popen(
            self.command, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_text()[-4000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    self._check_synthetic_weights()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        self.stop()
        raise TimeoutError(f"server not healthy after {timeout}s:\n{self.log_text()[-4000:]}")

    @property
    def pid(self) -> int:
        """The server's HTTP process; its scheduler and detokenizer are its descendants."""
        return self.proc.pid

    def _check_synthetic_weights(self) -> None:
        """With ``--load-format dummy`` and the synthetic seed set, the draw must have happened."""
        if expects_synthetic_draw(self.command, self.env) and DRAW_LOG not in self.log_text():
            self.stop()
            raise RuntimeError(f"{SEED_ENV} is set but the server did not draw synthetic weights "
                               f"(is corun-sglang's plugin loaded?); log: {self.log}")

    def log_text(self) -> str:
        """What this server has logged so far (not what earlier servers left in the same file)."""
        if not self._out.closed:
            self._out.flush()
        with open(self.log, errors="replace") as f:
            f.seek(self._log_start)
            return f.read()

    def stop(self, grace: float = 60) -> None:
        """Stop the server and every process it started (its session), freeing the GPU: asked to stop
        (SIGTERM), killed after ``grace`` seconds; at once with ``grace`` 0, for a server whose state is of no
        further use (SGLang's shutdown on SIGTERM waits 5 s for crash diagnostics)."""
        import signal

        if grace > 0 and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        if not self._out.closed:
            self._out.close()
