#!/usr/bin/env python3
"""FlashInfer's sampling kernels for sm90, built ahead of time, so that a fresh GPU host does not compile them.

usage: scripts/flashinfer_aot.py build [--gpu-dir .gpu]    on a CPU machine with nvcc 13 and the project's venv:
                                                          writes GPU_DIR/bin/flashinfer-aot-sm90-sampling.tar.gz
       scripts/flashinfer_aot.py check                    on the GPU host, after the wheelhouse's install.sh
                                                          (``scripts/gpu_queue.py install`` runs it)

Default SGLang samples through FlashInfer (``--sampling-backend flashinfer``), whose ``sampling`` module is
compiled on first use: about two minutes on a fresh host, inside the first sampled batch (measured in the
default arm of the demo chunk, docs/results/queue/demo-smollm2/). The wheelhouse's prebuilt kernels
(``../shared/gpu-host``) hold attention and norm only. This builds the module with the command lines FlashInfer
itself generates for sm90a and packs it in FlashInfer's ahead-of-time layout (``aot/<name>/<name>.so`` under
``flashinfer/data``), which the wheelhouse's ``install.sh`` unpacks from every ``flashinfer-aot-sm90*.tar.gz``
beside it.

Invariants:

- The archive's member path is FlashInfer's own ``JitSpec.aot_path`` relative to its AOT folder, so FlashInfer
  loads it instead of compiling, and only for the version it was built with (the archive name holds none:
  ``check`` refuses a version other than ``VERSION``).
- ``check`` runs the kernels on the GPU against exact expectations (a one-hot distribution samples its token
  under top-k/top-p and min-p; renormalized top-k rows sum to 1 and keep the k largest) and removes the module
  when any fails, so a bad build costs the compile it was meant to save, never a wrong sample.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

#: The FlashInfer version the module is built for (SGLang 0.5.17's pin).
VERSION = "0.6.15.post1"
ARCH = "9.0a"
ARCHIVE = "flashinfer-aot-sm90-sampling.tar.gz"


def specs():
    """FlashInfer's JIT modules built here, by name: the ones default SGLang compiles on a fresh host and the
    wheelhouse lacks."""
    from flashinfer.jit.sampling import gen_sampling_module

    return {"sampling": gen_sampling_module}


def member(spec) -> str:
    """Where ``spec``'s library goes in the archive: its AOT path relative to ``flashinfer/data``."""
    from flashinfer.jit import env

    return str(Path("aot") / spec.aot_path.relative_to(env.FLASHINFER_AOT_DIR))


def _toolchain(work: Path) -> dict[str, str]:
    """The build environment: sm90a only; headers and cudart from the CUDA wheels in this venv (the host has
    its toolkit, this machine only nvcc); an empty ``libcuda.so.1`` stands in for the driver, which the
    modules link but do not call at load."""
    import nvidia

    cu13 = Path(next(iter(nvidia.__path__))) / "cu13"
    cudart = next((p.parent for p in Path("/usr/local").glob("cuda*/lib*/libcudart.so")), cu13 / "lib")
    stubs = work / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    (stubs / "empty.c").write_text("")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stubs / "libcuda.so"),
                    str(stubs / "empty.c")], check=True)
    return {**os.environ, "FLASHINFER_CUDA_ARCH_LIST": ARCH, "FLASHINFER_WORKSPACE_BASE": str(work),
            "CPATH": os.pathsep.join(filter(None, [str(cu13 / "include"), os.environ.get("CPATH")])),
            "LIBRARY_PATH": os.pathsep.join(filter(None, [str(stubs), str(cudart), os.environ.get("LIBRARY_PATH")]))}


def build(gpu_dir: Path) -> Path:
    """Builds ``specs()`` for sm90a in a scratch workspace and writes the archive into ``gpu_dir/bin``."""
    import flashinfer

    if flashinfer.__version__ != VERSION:
        raise SystemExit(f"flashinfer {flashinfer.__version__} here, the host runs {VERSION}")
    out = gpu_dir / "bin" / ARCHIVE
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        env = _toolchain(Path(work))
        # FlashInfer reads the arch list and workspace when imported: build in a process of its own.
        script = ("import sys, time; from pathlib import Path; sys.path.insert(0, %r); import flashinfer_aot as a\n"
                  "for name, gen in a.specs().items():\n"
                  "    t = time.monotonic(); s = gen(); s.build(verbose=False)\n"
                  "    print(s.jit_library_path, a.member(s), round(time.monotonic() - t, 1), flush=True)\n"
                  % str(Path(__file__).parent))
        lines = subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True,
                               text=True).stdout.split("\n")
        with tarfile.open(out, "w:gz") as tar:
            for line in filter(None, lines):
                built, name, seconds = line.split()
                tar.add(built, arcname=name)
                print(f"{name}: built in {seconds} s", flush=True)
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return out


def _checks():
    """``(name, passed)`` for each exact expectation, run on the GPU through FlashInfer's public API."""
    import torch
    from flashinfer import sampling

    rows, vocab = 8, 4096
    hot = torch.tensor([0, 1, 17, 511, 2048, 4000, 4094, 4095], device="cuda")
    one_hot = torch.zeros(rows, vocab, device="cuda")
    one_hot[torch.arange(rows), hot] = 1.0
    k = torch.full((rows,), 20, device="cuda", dtype=torch.int32)
    p = torch.full((rows,), 0.9, device="cuda")
    yield "top-k/top-p samples the one-hot token", bool(
        (sampling.top_k_top_p_sampling_from_probs(one_hot, k, p) == hot).all())
    yield "min-p samples the one-hot token", bool(
        (sampling.min_p_sampling_from_probs(one_hot, torch.full((rows,), 0.1, device="cuda")) == hot).all())
    gen = torch.Generator(device="cuda").manual_seed(0)
    probs = torch.softmax(torch.randn(rows, vocab, device="cuda", generator=gen), dim=-1)
    renorm = sampling.top_k_renorm_probs(probs, 20)
    kept = renorm > 0
    largest = torch.zeros_like(kept).scatter_(1, probs.topk(20, dim=-1).indices, True)
    yield "top-k renorm keeps the k largest and sums to 1", bool(
        (kept == largest).all() and torch.allclose(renorm.sum(-1), torch.ones(rows, device="cuda"), atol=1e-4))


def check() -> int:
    """Runs ``_checks`` where the prebuilt modules are installed; removes them when any check fails."""
    import flashinfer
    from flashinfer.jit import env

    names = list(specs())
    installed = [Path(env.FLASHINFER_AOT_DIR) / name for name in names if (Path(env.FLASHINFER_AOT_DIR) / name).exists()]
    if not installed:
        print("flashinfer_aot: no prebuilt sampling module installed; FlashInfer compiles it on first use")
        return 0
    why = None if flashinfer.__version__ == VERSION else f"flashinfer {flashinfer.__version__}, built for {VERSION}"
    if why is None:
        began = time.monotonic()
        try:
            failed = [name for name, passed in _checks() if not passed]
            why = f"failed: {', '.join(failed)}" if failed else None
        except Exception as exc:  # a module that does not load is removed, not fatal
            why = f"{type(exc).__name__}: {exc}"
        if why is None:
            print(f"flashinfer_aot: prebuilt {', '.join(names)} ok ({time.monotonic() - began:.2f} s, no compile)")
            return 0
    for folder in installed:
        shutil.rmtree(folder)
    print(f"flashinfer_aot: prebuilt {', '.join(names)} removed ({why}); FlashInfer compiles it on first use")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("build").add_argument("--gpu-dir", default=".gpu")
    sub.add_parser("check")
    args = parser.parse_args(argv)
    if args.verb == "build":
        build(Path(args.gpu_dir))
        return 0
    return check()


if __name__ == "__main__":
    raise SystemExit(main())
