"""What a ``--corun`` server's first start costs on a shape: calibration included, then a later start that reads
the cached calibration.

    python -m bench.first_start --shape qwen3-8b --out first_start.json [--server-args "..."] [--later]

The first start runs with ``--corun-calibrate force`` (it calibrates whatever the cache holds, so the time is a
first start's), into the calibration cache the server would use anyway (``$CORUN_SGLANG_CACHE``, else the
user's), where later servers of the same environment find it. ``--later`` then starts the same command again
with ``auto`` and times that start, which serves the entry just written. Each start's seconds run from the
launch to ``/health`` answering; ``calibration`` is the server's own account (``/server_info``'s
``corun_contract.calibration``: what it serves, why not the rest, and how long the probes took).

Invariants: the servers get the same options but ``--corun-calibrate``; a start that fails is recorded with
its error and ends the run with status 1. ``phases`` reads from a first start's log where its calibration went.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path


def checkpoint(shape: str, root: Path) -> Path:
    """The model folder of ``shape``: SmolLM2 materialized from its package, else a synthetic shape."""
    if shape == "smollm2":
        from corun_sglang.tools import models

        dest = root / "smollm2"
        return dest if models.is_materialized(dest) else models.materialize("smollm2", dest)
    from corun_sglang.tools import synthetic

    return synthetic.prepare(root / f"ckpt-{shape}", shape, "in-place")


def start(model: Path, args: list[str], log: Path, static_gb: float | None) -> dict:
    import httpx

    from corun_sglang.probes.launch import Server

    began = time.monotonic()
    try:
        server = Server(str(model), args, log, timeout=1200, static_gb=static_gb)
    except (RuntimeError, TimeoutError) as exc:
        return {"seconds": round(time.monotonic() - began, 1), "error": str(exc)[-2000:]}
    try:
        info = httpx.get(server.url + "/server_info", timeout=30).json()
        contract = info.get("corun_contract") or {}
        return {"seconds": round(time.monotonic() - began, 1), "calibration": contract.get("calibration"),
                "system_fingerprint": contract.get("system_fingerprint"),
                "decode_graph": info.get("cuda_graph_bs_decode")}
    finally:
        server.stop()


#: A line of a first start's calibration (``calibration.prepare``'s): ``corun calibration [  63.7 s] what happened``.
CALIBRATION_LINE = re.compile(r"corun calibration \[\s*([\d.]+) s\] (.*)")
#: The lines that open each phase of a calibration on one candidate server, and the one that ends it.
MARKS = {"ready": "candidate server ready", "pack": "prefill pack: verifying", "tiers": "decode tiers: verifying",
         "done": "done in"}


#: A log line's wall-clock stamp (SGLang's and corun's loggers), and the line SGLang logs once it serves.
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (.*)$", re.M)
SERVING = "The server is fired up and ready to roll"


def phases(log_text: str) -> dict[str, float] | None:
    """Seconds of a first start's calibration spent starting its candidate server (``server``), in the pack probe
    and in the tiers probe (a part not probed is absent), and from its end to the serving server's first
    reply (``serving``, to the second: the log's clock; absent where the log does not get that far); None
    where the log holds no calibration on one candidate server."""
    marks: dict[str, float] = {}
    for at, what in CALIBRATION_LINE.findall(log_text):
        for name, opening in MARKS.items():
            if what.startswith(opening):
                marks.setdefault(name, float(at))
    if "ready" not in marks or "done" not in marks:
        return None
    found = {"server": marks["ready"]}
    if "pack" in marks:
        found["pack"] = round(marks.get("tiers", marks["done"]) - marks["pack"], 1)
    if "tiers" in marks:
        found["tiers"] = round(marks["done"] - marks["tiers"], 1)
    done = None
    for stamp, what in STAMP.findall(log_text):
        at = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
        if done is None and (m := CALIBRATION_LINE.search(what)) and m.group(2).startswith(MARKS["done"]):
            done = at
        elif done is not None and what.startswith(SERVING):
            found["serving"] = at - done
            break
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen3-8b", help="smollm2 or a synthetic shape")
    parser.add_argument("--server-args", default="", help="the serving command's options beyond --corun")
    parser.add_argument("--static-gb", type=float, help="static GPU memory of the server (default SGLang's)")
    parser.add_argument("--later", action="store_true", help="also time a later start serving the cache")
    parser.add_argument("--checkpoints", default="/tmp/first-start", help="where checkpoints are made")
    parser.add_argument("--out", default="first_start.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model = checkpoint(args.shape, Path(args.checkpoints))
    base = ["--corun", *args.server_args.split()]
    result = {"shape": args.shape, "server_args": args.server_args, "static_gb": args.static_gb}
    result["first"] = start(model, [*base, "--corun-calibrate", "force"], out.with_suffix(".first.log"),
                            args.static_gb)
    if args.later and "error" not in result["first"]:
        result["later"] = start(model, [*base, "--corun-calibrate", "auto"], out.with_suffix(".later.log"),
                                args.static_gb)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 1 if any("error" in result.get(k, {}) for k in ("first", "later")) else 0


if __name__ == "__main__":
    raise SystemExit(main())
