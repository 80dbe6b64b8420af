"""What the serving tests share: a one-process gloo group standing in for the TP group SGLang's layers and
sampler are built in."""

import socket
import sys

import pytest


@pytest.fixture(scope="session")
def tp_group():
    """SGLang's model-parallel state on a one-process gloo group (TP 1), initialized once per session. The
    process's ``sys.excepthook`` stays as it was (torch's process-group start wraps it)."""
    from sglang.srt.distributed import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        hook = sys.excepthook
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ps.init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}",
                                        local_rank=0, backend="gloo")
        ps.initialize_model_parallel(1)
        sys.excepthook = hook
