"""``--corun-calibrate``: ``--corun`` alone serves the fastest configuration verified for its environment.

On a start with ``--corun-calibrate auto`` (the default) and no record or candidate given, the server looks up its
calibration in a cache folder (``--corun-calibration-dir``, else ``$CORUN_SGLANG_CACHE``/ ``calibration``, else
``~/.cache/corun-sglang/calibration``) under its ``key``: a digest of the model's config, the server's own options
(``flags``, with ``--corun-moe-padding`` and ``--corun-gemm-library`` where given, and without the memory budget,
``MEMORY_OPTIONS``), the GPU, CUDA, the BLAS setup (its library the schedulers', not this process's) and the
installed versions, and what is calibrated (the tier candidates, the pack). Found, its verdicts are what it serves
(``Calibration``: the decode tiers record and the prefill pack record, which the start loads, ``pipeline.records``,
a pack waiting up to ``PACK_WAIT`` decode steps unless ``--corun-prefill-pack-wait`` is given). Not found, or with
``force``, the probes run first and their verdicts are cached. A probe that fails leaves its part unserved (plain
N, isolated prefill: still deterministic) with a log line saying why, and that verdict is cached too until
``force``. ``off`` serves plain ``--corun``; given records or candidates always win.

Both probes run on one candidate server, started with this server's options, its memory budget and both
candidates (``candidate_flags``: ``tier_candidates(N)`` and ``PACK``): the server's own model is loaded only
after calibration, so the candidate has the GPU to itself. The pack probe runs first
(``verify_packing.on_server``: the prefill batches the server logs while it runs are its own, and a packing
that decodes in another captured graph than its needle alone is judged on its prefill), then the
tiers probe (``verify_tiers.on_server``: its co-runners' short prompts are admitted in packs, its needles'
prefills are alone in every round, and each round ends once its needle has its reply). A server start
costs more than both probes, so one start instead of two is most of what a first start can save. A part the
serving options cannot serve (``scope``: decode graph sizes given; a pack ruled out by the prefill graph
options or the chunk size) is not probed, and its verdict says why; without a pack to verify the candidate
server prefills eagerly (``tiers_flags``): the tiers verdict compares the decode steps of one server's runs,
whose prefills all take that server's one path, and an eager prefill captures no graph. A candidate server
that does not start leaves both parts unserved, saying why.

Invariants: ``plan``, ``key``, ``flags``, ``tier_candidates``, ``scope``, ``candidate_flags`` and
``tiers_flags`` are pure; an entry is written whole or not at all (``calibration.json`` last, by
rename; one calibrated again is emptied first) under a per-key file lock, so servers starting at once
calibrate once; a served record still passes the start-up environment check (``environment.foreign``),
so a stale entry refuses to start rather than serve bits it did not verify.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from corun_sglang.core import config

logger = logging.getLogger(__name__)

MODES = ("auto", "off", "force")
#: The prefill pack calibrated: the token count verified on both Qwen3 shapes (docs/prefill_packing.md).
PACK = 1024
#: Decode steps a pack may wait for more prompts when calibration serves the pack (``packing.waits``).
PACK_WAIT = 32
#: Bumped when an entry's layout or what calibration verifies changes: older entries are not read.
FORMAT = 1
ENTRY = "calibration.json"
TIERS = "tiers.json"
PACK_FILE = "pack.json"

#: ServerArgs fields a candidate server does not take from the serving command (its own model path and
#: address; corun's own options are set by the probe).
NOT_PASSED = {"model_path", "host", "port"}
#: Options that size the server's memory (so its KV pool), not a kernel: passed to the candidate server,
#: left out of the key, so a start with another memory budget reuses the calibration.
MEMORY_OPTIONS = {"mem_fraction_static", "max_total_tokens"}
#: The candidate server's log, in the entry's folder.
SERVER_LOG = "candidate.server.log"
#: Options by which the serving command chooses the prefill CUDA graph itself (``tiers_flags``).
PREFILL_GRAPH_FLAGS = ("--disable-prefill-cuda-graph", "--cuda-graph-backend-prefill")


def tier_candidates(n: int) -> list[int]:
    """The decode graph sizes calibration verifies below N: N/8 and its quarters, those of at least 8. N/8 is 32
    at N = 256, the smallest size whose narrow decode GEMMs (4,096 outputs or fewer per rank) cuBLASLt, the
    GEMM library of ``--corun`` (``config.GEMM_LIBRARY``), sums in the 256-row order on the Qwen3-8B shape on
    an H100 and an H200: at 24 rows and fewer it runs another kernel (docs/results/gemm_tiers.md)."""
    return sorted({q for q in (n // 8, n // 4, n // 2, 3 * n // 4) if 8 <= q < n})


def _chooses_prefill_graph(cuda_graph_config: str) -> bool:
    """Whether a ``--cuda-graph-config`` value names the prefill backend (or is no JSON object of phases:
    then SGLang decides, refusing it)."""
    try:
        phases = json.loads(cuda_graph_config)
    except ValueError:
        return True
    if not isinstance(phases, dict):
        return True
    prefill = phases.get("prefill") or {}
    return not isinstance(prefill, dict) or "backend" in prefill


def tiers_flags(server_flags: list[str]) -> list[str]:
    """``server_flags`` for a candidate server without a pack candidate: without SGLang's prefill CUDA graph
    (``--disable-prefill-cuda-graph``), unless they choose it themselves (``PREFILL_GRAPH_FLAGS``, or a
    ``--cuda-graph-config`` naming the prefill backend). Every prefill on one server takes that server's
    one path, so its prefill graph changes no verdict on its decode steps; eager prefill captures nothing."""
    chosen = any(flag in PREFILL_GRAPH_FLAGS for flag in server_flags) or any(
        flag == "--cuda-graph-config" and _chooses_prefill_graph(value)
        for flag, value in zip(server_flags, server_flags[1:]))
    return list(server_flags) if chosen else [*server_flags, "--disable-prefill-cuda-graph"]


def scope(args: Any, n: int) -> tuple[list[int], int | None, dict[str, str]]:
    """What calibration verifies for ``args`` (N = ``n``): the tier candidates, the pack (None: none), and why a
    part is left out. Only SGLang's own options decide (they are in the key): decode graph sizes given leave
    the tiers out, prefill graph options or a chunk size below ``PACK`` the pack."""
    from corun_sglang.core import packing

    why: dict[str, str] = {}
    candidates = tier_candidates(n)
    if (reason := config.unservable_tiers(args)) is not None:
        why["tiers"], candidates = reason, []
    elif not candidates:
        why["tiers"] = f"N = {n} has no quarter of at least 8 below it"
    pack: int | None = PACK
    reasons = ([reason] if (reason := config.pack_graph_conflict(args)) is not None else []) + \
        packing.pack_problems(PACK, getattr(args, "chunked_prefill_size", None))
    if reasons:
        why["pack"], pack = "; ".join(reasons), None
    return candidates, pack, why


def candidate_flags(server_flags: list[str], n: int, candidates: list[int], pack: int | None) -> list[str]:
    """The options of the one candidate server: ``--corun``, the tier candidates against N and the pack
    candidate (those given), then the serving command's ``server_flags``; without a pack, prefilling eagerly
    (``tiers_flags``)."""
    from corun_sglang.probes import verify_packing, verify_tiers

    own = ["--corun", *(verify_tiers.candidate_args(candidates, n) if candidates else []),
           *(verify_packing.candidate_args(pack) if pack is not None else [])]
    return [*own, *(list(server_flags) if pack is not None else tiers_flags(server_flags))]


def cache_root(explicit: str | None, environ: Mapping[str, str]) -> Path:
    if explicit:
        return Path(explicit)
    if environ.get("CORUN_SGLANG_CACHE"):
        return Path(environ["CORUN_SGLANG_CACHE"]) / "calibration"
    return Path.home() / ".cache" / "corun-sglang" / "calibration"


def flags(args: Any, defaults: Mapping[str, Any], free: set[str]) -> list[str]:
    """The command-line options of ``args`` a candidate server needs: every SGLang option set away from
    its default, except those that change no kernel (``free``) and ``NOT_PASSED``; in field order."""
    out: list[str] = []
    for name, default in defaults.items():
        if name in NOT_PASSED or name in free or name.startswith("corun"):
            continue
        value = getattr(args, name, default)
        if value == default:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            if value:
                out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value, sort_keys=True)]
        elif value is not None:
            out += [flag, str(getattr(value, "value", value))]
    return out


def key(parts: Mapping[str, Any]) -> str:
    """16 hex digits naming a calibration: equal parts, equal key."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def plan(mode: str, given: bool, gpu: str | None, cached: bool) -> str:
    """What a start does: ``given`` (records or candidates passed), ``off``, ``no-gpu``, ``cached`` or
    ``calibrate``."""
    if mode not in MODES:
        raise ValueError(f"--corun-calibrate {mode!r}: one of {', '.join(MODES)}")
    if given:
        return "given"
    if mode == "off":
        return "off"
    if gpu is None:
        return "no-gpu"
    return "cached" if cached and mode == "auto" else "calibrate"


@dataclasses.dataclass
class Calibration:
    """What a start served and why: ``/server_info``'s ``corun_calibration``."""

    source: str  # given | off | no-gpu | cached | calibrated
    folder: str | None = None
    seconds: float | None = None  # how long the probes took (when they ran, or when the entry was made)
    tiers: list[int] | None = None
    pack: int | None = None
    why: dict[str, str] = dataclasses.field(default_factory=dict)  # part -> why it is not served

    def as_info(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def tiers_file(self) -> Path | None:
        """The decode tiers record served (None: none)."""
        return None if self.tiers is None else Path(self.folder) / TIERS

    @property
    def pack_file(self) -> Path | None:
        """The prefill pack record served (None: none)."""
        return None if self.pack is None else Path(self.folder) / PACK_FILE

    def refuse(self, part: str, why: str) -> None:
        """``part`` (``tiers`` or ``pack``) is not served, for ``why``."""
        setattr(self, part, None)
        self.why[part] = why


@dataclasses.dataclass(frozen=True)
class Probes:
    """The candidate server's start (``launch.Server``: model path, options, log; stopped with ``stop(grace=0)``)
    and the two probes run on it
    (``verify_tiers.on_server``, ``verify_packing.on_server``), each returning its record."""

    start: Callable[[str, list[str], Path], Any]
    tiers: Callable[..., Any]
    pack: Callable[..., Any]


def default_probes() -> Probes:
    from corun_sglang.probes import launch, verify_packing, verify_tiers

    return Probes(lambda model_path, options, log: launch.Server(model_path, options, log),
                  verify_tiers.on_server, verify_packing.on_server)


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_entry(folder: Path) -> dict | None:
    """An entry's verdicts, or None if it is absent, partial or of another ``FORMAT``."""
    try:
        entry = json.loads((folder / ENTRY).read_text())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and entry.get("format") == FORMAT else None


def _clear(folder: Path) -> None:
    """An entry calibrated again starts empty: its verdicts first (so it is never read half removed), then its
    records and logs, none of which then outlives the calibration that made it."""
    import shutil

    (folder / ENTRY).unlink(missing_ok=True)
    if folder.exists():
        shutil.rmtree(folder)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _labelled(say: Callable[[str], None], label: str) -> Callable[[str], None]:
    return lambda line: say(f"{label}: {line}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _verdict(probe: Callable[[], Any]) -> Any:
    """The probe's verdict, or why it failed."""
    try:
        return probe()
    except Exception as exc:  # the probe or its server failed: its part is not served
        return f"the probe failed: {exc}"


def run_probes(folder: Path, model_path: str, n: int, server_flags: list[str], probes: Probes,
               say: Callable[[str], None], candidates: list[int], pack: int | None,
               why: Mapping[str, str] = {}) -> dict:
    """The probes of ``candidates`` and ``pack`` into ``folder``, on one candidate server, the pack first; the
    entry's verdicts (``tiers``/``pack``: a list/int, or a reason; ``why`` gives it for a part not probed).
    Each probe's lines go to ``say`` behind its name."""
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    verdicts: dict[str, Any] = {part: f"not calibrated: {reason}" for part, reason in why.items()}
    if candidates or pack is not None:
        log = folder / SERVER_LOG
        say(f"starting the candidate server (decode tiers {candidates or 'none'} against N = {n}, prefill pack "
            f"{pack or 'none'}; log: {log})")
        try:
            server = probes.start(model_path, candidate_flags(server_flags, n, candidates, pack), log)
        except Exception as exc:  # no verdict on either part
            verdicts.update({part: f"the candidate server did not start: {_first_line(exc)}"
                             for part, wanted in (("tiers", candidates), ("pack", pack)) if wanted})
        else:
            say(f"candidate server ready at {server.url}")
            try:
                if pack is not None:
                    tell = _labelled(say, "prefill pack")
                    tell(f"verifying {pack} tokens")
                    verdicts["pack"] = _verdict(lambda: int(probes.pack(
                        server, model_path, pack, folder / PACK_FILE, progress=tell).pack))
                if candidates:
                    tell = _labelled(say, "decode tiers")
                    tell(f"verifying {candidates} against N = {n}")

                    def tiers() -> Any:
                        record = probes.tiers(server, model_path, candidates, n, folder / TIERS, progress=tell)
                        return list(record.tiers) if record.tiers else "no candidate gave the N-slot bits"

                    verdicts["tiers"] = _verdict(tiers)
            finally:
                server.stop(grace=0)  # nothing of it is kept: its GPU memory is free long before the model loads
    verdicts["seconds"] = round(time.monotonic() - started, 1)
    return verdicts


def serve(folder: Path, entry: dict, source: str) -> Calibration:
    """What an entry serves (its records' files: ``Calibration.tiers_file``, ``pack_file``) and why the rest is
    not."""
    found = Calibration(source, str(folder), entry.get("seconds"))
    if isinstance(entry.get("tiers"), list) and (folder / TIERS).exists():
        found.tiers = entry["tiers"]
    else:
        found.why["tiers"] = str(entry.get("tiers"))
    if isinstance(entry.get("pack"), int) and (folder / PACK_FILE).exists():
        found.pack = entry["pack"]
    else:
        found.why["pack"] = str(entry.get("pack"))
    return found


def prepare(args: Any, parts: Callable[[], Mapping[str, Any]], gpu: str | None,
            environ: Mapping[str, str] = os.environ, probes: Probes | None = None,
            server_flags: list[str] = ()) -> Calibration:
    """Before ``args`` resolve: what the calibration of ``parts()`` (``key``) serves, calibrating first if needed.
    ``args`` are read, never written."""
    given = any(getattr(args, name, None) for name in (
        "corun_decode_tiers", "corun_decode_tier_candidates", "corun_prefill_pack", "corun_prefill_pack_candidate"))
    mode = getattr(args, "corun_calibrate", "auto")
    early = plan(mode, given, gpu, False)
    if early in ("given", "off", "no-gpu"):
        if early == "no-gpu":
            logger.warning("corun calibration: no GPU found, serving plain --corun")
        return Calibration(early)
    parts = parts()
    root = cache_root(getattr(args, "corun_calibration_dir", None), environ)
    folder = root / key(parts)
    action = plan(mode, given, gpu, read_entry(folder) is not None)
    if action == "cached":
        logger.info("corun calibration: serving %s", folder)
        return serve(folder, read_entry(folder), "cached")
    with _locked(root / f"{folder.name}.lock"):
        entry = read_entry(folder) if mode == "auto" else None  # another server may have calibrated meanwhile
        if entry is not None:
            return serve(folder, entry, "cached")
        started = time.monotonic()

        def say(line: str) -> None:
            logger.info("corun calibration [%6.1f s] %s", time.monotonic() - started, line)

        say(f"first start in this environment: calibrating into {folder} on a candidate server of its own")
        n = config.batch_size(args)
        candidates, pack, why = scope(args, n)
        _clear(folder)
        verdicts = run_probes(folder, args.model_path, n, list(server_flags), probes or default_probes(), say,
                              candidates, pack, why)
        entry = {"format": FORMAT, "key": folder.name, "parts": dict(parts), **verdicts}
        _write_json(folder / ENTRY, entry)
        say(f"done in {verdicts['seconds']} s: tiers {verdicts['tiers']}, pack {verdicts['pack']}")
        return serve(folder, entry, "calibrated")


def gpu_name(environ: Mapping[str, str] = os.environ) -> str | None:
    """The name of the first visible NVIDIA GPU (NVML), or None without one."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() == 0:
                return None
            visible = environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
            index = int(visible) if visible.isdigit() else 0
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            return name.decode() if isinstance(name, bytes) else str(name)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library, no device: nothing to calibrate on
        return None


def model_config(args: Any) -> dict:
    """The model's config as a dict (a local folder's config.json, else Transformers' AutoConfig)."""
    local = Path(args.model_path) / "config.json"
    if local.exists():
        return json.loads(local.read_text())
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(args.model_path, trust_remote_code=bool(args.trust_remote_code),
                                          revision=getattr(args, "revision", None)).to_dict()
    except Exception:
        return {"model_path": str(args.model_path)}


def key_parts(args: Any, server_flags: list[str], gpu: str | None) -> dict:
    """What a calibration depends on: the model, the options, the hardware and software, what it verifies."""
    import torch

    from corun_sglang.records import environment

    n = config.batch_size(args)
    return {
        "format": FORMAT,
        "model": environment.model_digest(model_config(args)),
        "flags": server_flags,
        "n": n,
        "gpu": gpu,
        "cuda": torch.version.cuda,
        "blas": {k: environment.flat(v)
                 for k, v in sorted(environment.blas_setup(library=config.gemm_library(args)).items())},
        "versions": environment.versions(),
        "tier candidates": tier_candidates(n),
        "pack": PACK,
    }
