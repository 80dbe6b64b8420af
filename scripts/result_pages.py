#!/usr/bin/env python3
"""Results pages drawn from GPU queue chunks: the demo (``demo.md``), calibration (``calibration.md``), the
GPU checks (``checks.md``) and the decode split experiment (``decode_split.md``).

usage: scripts/result_pages.py [RESULTS_DIR]      (default docs/results; ``scripts/gpu_queue.py`` runs it)

Invariants: each page is a pure function of the committed files it names (``demo``: the demo chunk's
``demo.json`` and ``chunk.json``; ``calibration``: every ``calibration.json`` under ``calibration/`` and the
``first_start.json`` of every ``calibrate-*`` chunk; ``checks``: the ``chunk.json``, pytest log and ``note.md``
of every folder under ``checks/``; ``decode_split``: the ``decode_split*.json`` and ``chunk.json`` of every
``decode-split-*`` chunk); a page whose data is absent is not written.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _record(folder: Path) -> dict:
    path = folder / "chunk.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _where(record: dict) -> str:
    gpu = (record.get("gpu") or "unknown GPU").split(",")
    return (f"{gpu[0].strip()}{f' (`{gpu[2].strip()}`)' if len(gpu) > 2 else ''}, {record.get('software') or ''}, "
            f"commit {(record.get('commit') or '?')[:7]}, runtime `{record.get('runtime', '?')}`, "
            f"{record.get('started', '')}")


#: How a ``--corun`` server's log names the calibration entry it served or wrote.
_CALIBRATION_LINE = re.compile(r"corun calibration(?::| \[[^\]]*\]) (?:serving|first start in this environment: "
                               r"calibrating into) \S*/([0-9a-f]{16})\b")


def _log_text(log: Path) -> str | None:
    """A log's text, as ``ingest`` keeps it (``<name>.log.gz``) or as written (``<name>.log``); None if neither."""
    for path, opener in ((log.with_suffix(".log.gz"), gzip.open), (log, open)):
        if path.is_file():
            with opener(path, "rt", errors="replace") as f:
                return f.read()
    return None


def _served_calibration(folder: Path) -> str | None:
    """The key of the calibration entry the demo's ``--corun`` server served, from its log (plain or gzipped)."""
    match = _CALIBRATION_LINE.search(_log_text(folder / "demo.corun.log") or "")
    return match.group(1) if match else None


def _calibration_note(folder: Path) -> list[str]:
    """One paragraph on the calibration ``--corun`` served and what verifying it cost its first start."""
    key = _served_calibration(folder)
    path = folder.parents[1] / "calibration" / (key or "-") / "calibration.json"
    if not key or not path.is_file():
        return []
    entry = json.loads(path.read_text())
    return [f"`--corun` served calibration entry [{key}](calibration/{key}/): decode tiers {entry.get('tiers')} and "
            f"a {entry.get('pack')}-token prefill pack, which the first start on this GPU kind verified in "
            f"{entry.get('seconds')} s of probes. [calibration.md](calibration.md) has the measured first and later "
            "starts.", ""]


def demo_page(folder: Path) -> str | None:
    """``demo.md``: the demo's side-by-side table and verdicts, from ``folder``/demo.json."""
    path = folder / "demo.json"
    if not path.is_file():
        return None
    sys.path.insert(0, str(ROOT))
    from corun_sglang.commands import demo

    data = json.loads(path.read_text())
    arms = {name: [demo.Row(**row) for row in arm["rows"]] for name, arm in data["arms"].items()}
    settings = data.get("settings", {})
    concurrency = int(settings.get("concurrency", 256))
    lines = ["# `corun-sglang demo`", "",
             "SmolLM2-135M-Instruct served through SGLang's chat endpoint, under `--corun` (its first start "
             "calibrated, or served the committed calibration) and as default SGLang (radix cache off, FlashInfer, "
             "greedy): each prompt alone, then among concurrent co-runners. A prompt keeps its result when its "
             "tokens and the bits of its logprobs are the same.", "",
             f"Ran as GPU queue chunk `demo-smollm2` ([queue/demo-smollm2/](queue/demo-smollm2/)): {_where(_record(folder))}.",
             "", *_calibration_note(folder), "    corun-sglang demo --out demo.json", "", "```",
             demo.render(arms, concurrency), "```", ""]
    for name, arm in data["arms"].items():
        lines.append(f"- {demo.ARM_TITLES.get(name, name)}: `{' '.join(arm.get('command') or [])}`")
    return "\n".join(lines) + "\n"


def _phases(log: Path) -> dict:
    """``bench.first_start.phases`` of a first start's log (kept gzipped); empty where it has none."""
    sys.path.insert(0, str(ROOT))
    from bench.first_start import phases

    text = _log_text(log)
    return (None if text is None else phases(text)) or {}


def _first_start_cells(first: dict, found: dict) -> str:
    """The first start's cells: launch to calibration, candidate start / pack / tiers, serving start."""
    probes = (first.get("calibration") or {}).get("seconds")
    launch = ("-" if None in (first.get("seconds"), probes, found.get("serving"))
              else round(first["seconds"] - probes - found["serving"], 1))
    split = " / ".join(str(found.get(k, "-")) for k in ("server", "pack", "tiers")) if found else "-"
    return f"{launch} | {split} | {found.get('serving', '-')}"


def calibration_page(results: Path) -> str | None:
    """``calibration.md``: every committed calibration entry, and every measured first start."""
    entries = sorted((results / "calibration").glob("*/calibration.json"))
    starts = sorted(results.glob("queue/calibrate-*/first_start.json"))
    if not entries and not starts:
        return None
    lines = ["# Calibration", "",
             "What `--corun`'s first start verified and cached, and what a first start costs. The cache "
             "(`docs/results/calibration/`, one folder per key) is what GPU queue chunks serve: every `--corun` "
             "server of a chunk reads it, and a chunk files the entries it writes there.", ""]
    if starts:
        lines += ["## First starts measured", "",
                  "| chunk | shape | options | first start (s) | probes (s) | launch (s) | "
                  "candidate start / pack / tiers (s) | serving start (s) | tiers | pack | later start (s) | where |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for path in starts:
            r = json.loads(path.read_text())
            first, later = r.get("first", {}), r.get("later", {})
            cal = first.get("calibration") or {}
            lines.append(f"| {path.parent.name} | {r.get('shape')} | `{r.get('server_args')}` | "
                         f"{first.get('seconds', first.get('error', '?'))} | {cal.get('seconds')} | "
                         f"{_first_start_cells(first, _phases(path.parent / 'first_start.first.log'))} | "
                         f"{cal.get('tiers')} | "
                         f"{cal.get('pack')} | {later.get('seconds', '-')} | {_where(_record(path.parent))} |")
        lines += ["", "A first start is its launch (to the calibration's first line: imports, options), the probes "
                  "(candidate start / pack / tiers: where their seconds went) and the serving server's start "
                  "after them, to the second (`bench.first_start.phases`, from the first start's log); `-` for a "
                  "log of another calibration."]
        lines.append("")
    if entries:
        lines += ["## Cached entries", "",
                  "| key | GPU | N | options | tiers | pack | probes (s) |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for path in entries:
            e = json.loads(path.read_text())
            parts = e.get("parts", {})
            lines.append(f"| [{e.get('key')}](calibration/{path.parent.name}/) | {parts.get('gpu')} | {parts.get('n')} | "
                         f"`{' '.join(parts.get('flags') or []) or '-'}` | {e.get('tiers')} | {e.get('pack')} | "
                         f"{e.get('seconds')} |")
        lines.append("")
    return "\n".join(lines)


#: pytest's ``-rA`` summary line of one test, and a ``--durations`` line.
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/\S+?)(?: - (.*))?$")
_DURATION = re.compile(r"^([0-9.]+)s (?:setup|call|teardown) +(tests/\S+)")


def outcomes(lines: list[str]) -> list[tuple[str, str, float, str]]:
    """Each test of a pytest ``-rA --durations=0`` log: (test, outcome, seconds over its phases, message), in
    the order of the summary; a test the log names in no summary line (a run cut short) is absent."""
    seconds: dict[str, float] = {}
    found: dict[str, tuple[str, str]] = {}
    for line in lines:
        if m := _DURATION.match(line):
            seconds[m.group(2)] = seconds.get(m.group(2), 0.0) + float(m.group(1))
        elif (m := _OUTCOME.match(line)) and m.group(2) not in found:
            found[m.group(2)] = (m.group(1), (m.group(3) or "").strip())
    return [(test, outcome, round(seconds.get(test, 0.0), 1), message) for test, (outcome, message) in found.items()]


def checks_page(results: Path) -> str | None:
    """``checks.md``: every GPU check chunk (``checks/<chunk>/``), its tests' outcomes and its note."""
    folders = sorted(f for f in (results / "checks").glob("*") if (f / "chunk.json").is_file())
    if not folders:
        return None
    lines = ["# GPU checks", "",
             "The server-level checks of `--corun` outside the determinism suite: a server starts and serves, bad "
             "requests get their 4xx while seeded co-runners keep their bits, one configuration gives one "
             "`system_fingerprint`, a returned seed replays its sample, unseeded requests repeat across a restart, "
             "and the core determinism test with default SGLang as its negative control. Each section is one GPU "
             "queue chunk (`scripts/gpu_queue.toml`, `checks-*`), whose folder holds its pytest log, the tests' "
             "JSON and the servers' logs.", ""]
    for folder in folders:
        record = _record(folder)
        rc = record.get("rc")
        verdict = "passed" if rc == 0 else "cut by its time limit" if record.get("timed_out") else f"rc {rc}"
        lines += [f"## {folder.name}", "", f"{verdict}, {record.get('wall_s', '?')} s: {_where(record)} "
                  f"([checks/{folder.name}/](checks/{folder.name}/)).", "", f"    {record.get('command', '?')}", "",
                  "| test | outcome | seconds |", "| --- | --- | ---: |"]
        for test, outcome, secs, message in outcomes((_log_text(folder / "chunk.log") or "").splitlines()):
            lines.append(f"| `{test.split('::', 1)[-1]}` | {outcome.lower()}{f': {message}' if message else ''} | "
                         f"{secs} |")
        note = folder / "note.md"
        if note.is_file():
            lines += ["", " ".join(note.read_text().split())]
        lines.append("")
    return "\n".join(lines)


def _ms(row: dict) -> str:
    if row.get("ms") is None:
        return "refused" if row.get("error") else "-"
    fits = row.get("fits") or {}
    return f"{row['ms']:.3f}" + ("" if all(fits.values()) else " (grid)")


def _bits(b: dict | None) -> str:
    if not isinstance(b, dict):
        return "-"
    if b.get("error") and not b.get("compared"):
        return "refused"
    return f"{b['divergent']} / {b['compared']}" + (f" (output {b['output_divergent']})"
                                                     if "output_divergent" in b else "")


def decode_split_page(results: Path) -> str | None:
    """``decode_split.md``: each ``bench.decode_split`` run, its bits per split, eagerly and in CUDA graphs, and
    its times."""
    runs = sorted(results.glob("queue/decode-split-*/decode_split*.json"))
    if not runs:
        return None
    lines = ["# Decode attention with a fixed KV split", "",
             "Whether a fixed KV split keeps a request's attention bits whatever runs beside it, and what it buys "
             "where few requests decode (`bench/decode_split.py`, `bench/decode_split_graph.py`). Bits: a needle "
             "among co-runners against itself alone, output and log-sum-exp (\"output\": the bf16 output alone), "
             "divergent / compared; `off` is what `--corun` serves, `auto` the library's own split (the negative "
             "control). Times: one layer's attention, ms.", ""]
    for path in runs:
        r = json.loads(path.read_text())
        lines += [f"## {r.get('kernel', 'flashinfer')}: {path.parent.name}", "",
                  f"{_where(_record(path.parent))}; `{r.get('command', '')}`", "",
                  "| split | needle among co-runners vs alone |", "| --- | --- |"]
        lines += [f"| {s} | {_bits(b)} |" for s, b in r.get("bits", {}).items()]
        timing = r.get("timing") or []
        splits = list(dict.fromkeys(row["split"] for row in timing))
        lines += ["", "Eager, per request count and KV length; \"(grid)\": more chunks than a CUDA-graph plan of "
                  f"{' or '.join(map(str, r.get('graph_grid', {})))} slots holds without a wider grid.", "",
                  "| requests x KV tokens | " + " | ".join(splits) + " |", "| --- |" + " ---: |" * len(splits)]
        cells: dict = {}
        for row in timing:
            cells.setdefault(f"{row['load']} x {row['kv_len']}", {})[row["split"]] = _ms(row)
        lines += [f"| {k} | " + " | ".join(v.get(s, "-") for s in splits) + " |" for k, v in cells.items()]
        if r.get("graph"):
            lines += ["", "In CUDA graphs: vs the needle alone eagerly (merge arrays fixed after an unsplit plan), "
                      "vs alone in the graph, and without the fix (the control); a full graph of requests four "
                      "splits long with FlashInfer's grid and with the widened one.", "",
                      "| graph | split | grid | vs eager alone | vs graph alone | unfixed | full graph | error |",
                      "| ---: | --- | ---: | --- | --- | --- | --- | --- |"]
            for g in r["graph"]:
                full = g.get("full_4x_split") or {}
                lines.append(f"| {g['slots']} | {g['split']} | {g.get('grid') or '-'} | {_bits(g.get('fixed'))} | "
                             f"{_bits(g.get('fixed_graph_alone'))} | {_bits(g.get('unfixed'))} | "
                             f"{'; '.join(f'{k}: {v[:40]}' for k, v in full.items()) or '-'} | "
                             f"{(g.get('error') or '-')[:80]} |")
        if r.get("graph_timing"):
            gsplits = list(dict.fromkeys(row["split"] for row in r["graph_timing"]))
            lines += ["", "A graph replay (one layer), ms:", "",
                      "| graph: requests x KV tokens | " + " | ".join(gsplits) + " |",
                      "| --- |" + " ---: |" * len(gsplits)]
            gcells: dict = {}
            for row in r["graph_timing"]:
                gcells.setdefault(f"{row['slots']}: {row['load']} x {row['kv_len']}", {})[row["split"]] = _ms(row)
            lines += [f"| {k} | " + " | ".join(v.get(s, "-") for s in gsplits) + " |" for k, v in gcells.items()]
        note = path.parent / "note.md"
        lines += ["", note.read_text().strip() if note.is_file() else "", ""]
    return "\n".join(lines).rstrip() + "\n"


def write(results: Path) -> list[str]:
    """Writes the pages whose data is committed; returns their names."""
    written = []
    for name, text in (("demo.md", demo_page(results / "queue" / "demo-smollm2")),
                       ("calibration.md", calibration_page(results)), ("checks.md", checks_page(results)),
                       ("decode_split.md", decode_split_page(results))):
        if text is not None:
            (results / name).write_text(text)
            written.append(name)
    return written


if __name__ == "__main__":
    print(", ".join(write(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "results")) or "no pages")
