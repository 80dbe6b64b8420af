#!/usr/bin/env python3
"""The determinism suite's report, regenerated from its per-request rows.

usage: scripts/determinism_report.py RESULTS_DIR [--out docs/results/determinism.md] [--title "..."]
       [--commit SHA] [--command "..." ...] [--host "..."] [--note "..." ...]

Reads every ``requests.jsonl`` (one line per output the suite received) and ``suite.jsonl`` (one line
per (shape, arm, scenario) run) under RESULTS_DIR, recursively, and writes the markdown report to
--out and a JSON summary next to it (the same name, ``.json``).

Invariants:

- Every divergent / compared count is recomputed from the digests in requests.jsonl: a ``compared``
  or ``null`` row is divergent iff its digest differs from its reference's: the ``reference`` row of
  (shape, reference_arm or arm, scenario, key) read last before it (a parametrized scenario writes its
  keys once per parameter, each reference before the rows compared with it), or the first one read
  after it where none precedes it. The suite's own ``first_divergence`` and counts are only cross-checked.
- ``null`` rows (the request alone a second time) are counted apart from ``compared`` rows.
- A cell with suite.jsonl rows but no per-request rows at all (older rows) keeps the suite's counts,
  marked ``*`` in the report and listed under ``unverified`` in the JSON summary.
- suite.jsonl supplies what a digest cannot: the server-observed overlap, prefix-cache hits, aborts,
  distinct samples, the arms that did not start and the servers that exited in a scenario. A key missing from a row reads as null.
- Each control arm (``MUST_DIVERGE``) has its own negative-control table and check: default SGLang must
  diverge in a, b, d and i, default SGLang with its radix cache on in s. Scenario s's prefix-cache hits
  (each request row's ``cached_tokens``) are tabulated per shape, arm and run.
- The exit status is 1 iff the Consistency section lists a problem.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
from pathlib import Path

SCENARIOS = {
    "a": "bs 1 vs bs 32 (32 prompts, T 0.6, 16 tokens)",
    "b": "needle at a random position in batches of 64-256 (128 tokens)",
    "c": "arrival-order permutations of 64 prompts (32 tokens)",
    "d": "needle while 1, 7, 63, 255 others run",
    "e": "long outputs (1024 tokens)",
    "f": "prompts longer than 3 chunks",
    "g": "n = 4 samples: reproducible and distinct",
    "h": "co-runners aborted mid-generation",
    "i": "top-p / top-k needles among co-runners with mixed filters (64 tokens)",
    "j": "MoE padding rows: `--corun-moe-padding skip` and `compute` against each other (default: SGLang "
         "against `--corun`), alone and among 1-255 others (64 tokens)",
    "k": "streamed needles among co-runners against non-streamed alone",
    "l": "requests ended by a stop token or EOS, alone vs among co-runners",
    "m": "n = 4 samples of a request among co-runners, each against the same sample alone",
    "n": "top-k logprobs (1 to 20, prompt top-k, chosen token ids, a regex needle's ties) among co-runners "
         "asking 0 to 64",
    "o": "frequency, presence and repetition penalties among arriving co-runners with other penalties (96 tokens)",
    "p": "min_new_tokens and logit_bias (EOS boosted but held back, tokens banned) among co-runners",
    "q": "a JSON schema, a regex and an EBNF grammar (xgrammar) among co-runners with other grammars",
    "r": "the openai client: logprobs 5 with echo, top_logprobs, a JSON-schema response_format and forced tool "
         "calls, alone vs among 48 clients and 64 others",
    "s": "prefix-cache hits against cold runs: whole-prompt hits alone, then among co-runners warm, whole, "
         "partial, after eviction, and n = 4 groups",
    "t": "grammars through SGLang's reasoning wrapper (`--reasoning-parser qwen3`): needles thinking unmasked until "
         "their own tokens close the think tag, then a JSON schema, a regex, an EBNF grammar or a tool call's "
         "structural tag, among co-runners with grammars and tool calls behind reasoning, grammars alone and none",
    "http-verify": "OpenAI completions: alone vs 2 concurrent rounds of 128 (`verify`)",
    "http-chat": "OpenAI chat: alone vs 64 concurrent clients",
    "http-restart": "unseeded requests: before vs after a server restart",
}
ARMS = ("default", "default-radix", "deterministic", "corun", "corun-prefix", "corun-moe-compute", "corun-moe-skip")
#: the negative controls: each control arm and the scenarios where it must diverge
MUST_DIVERGE = {"default": ("a", "b", "d", "i"), "default-radix": ("s",)}
#: the scenarios default SGLang must diverge in too, for the shapes that ran them (test_suite_surface.py)
SURFACE_MUST_DIVERGE = ("n", "o", "p", "q", "r", "t")
CONTROL_NAMES = {"default": "default SGLang", "default-radix": "default SGLang with its radix cache"}
#: the scenario whose prefix-cache hits get a table of their own
PREFIX = "s"
ROLES = ("reference", "null", "compared")
REQUIRED = ("shape", "arm", "scenario", "key", "role", "digest")
STEPS = ("prefill", "decode", "prompt_logprobs")  # first_divergence 0, >= 1, -1


# ---------------------------------------------------------------- loading

def find_inputs(root: Path) -> tuple[dict[str, list[Path]], list[Path]]:
    """({"requests": [...], "suite": [...]}, skipped): the input files under ``root``, recursively.

    A file whose every line also appears in same-named files deeper under its own folder is a
    concatenation of them (``determinism_suite.sh`` writes one) and is skipped, so no row counts twice.
    """
    found, skipped = {}, []
    for stem in ("requests", "suite"):
        files = sorted(root.rglob(f"{stem}.jsonl"))
        kept = []
        for f in files:
            deeper = [g for g in files if g != f and f.parent in g.parents]
            lines = {line for line in f.read_text().splitlines() if line.strip()}
            if deeper and lines <= {line for g in deeper for line in g.read_text().splitlines()}:
                skipped.append(f)
            else:
                kept.append(f)
        found[stem] = kept
    return found, skipped


def read_jsonl(path: Path, label: str) -> tuple[list[dict], list[str]]:
    """(rows, problems): one dict per non-blank line; a line that is not a JSON object is a problem."""
    rows, problems = [], []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{label}:{n}: not JSON ({exc.msg})")
            continue
        if not isinstance(row, dict):
            problems.append(f"{label}:{n}: not a JSON object")
            continue
        rows.append(row)
    return rows, problems


def load(root: Path) -> tuple[list[dict], list[dict], dict, list[str]]:
    """(requests, suite, sources, problems): every row under ``root`` and where each file's rows came from."""
    files, skipped = find_inputs(root)
    rows = {"requests": [], "suite": []}
    sources = {"requests": {}, "suite": {}, "skipped": [str(f.relative_to(root)) for f in skipped]}
    problems = []
    for stem, paths in files.items():
        for path in paths:
            label = str(path.relative_to(root))
            got, bad = read_jsonl(path, label)
            rows[stem] += got
            problems += bad
            sources[stem][label] = len(got)
    if not rows["requests"] and not rows["suite"]:
        problems.append(f"no requests.jsonl or suite.jsonl rows under {root}")
    return rows["requests"], rows["suite"], sources, problems


# ---------------------------------------------------------------- recomputing

def cell_key(shape: str, scenario: str, arm: str) -> str:
    """The key of a (shape, scenario, arm) cell in the JSON summary and in problem lines."""
    return f"{shape}|{scenario}|{arm}"


def _flag(found: dict, where: str, what: str, row: dict | None = None) -> None:
    entry = found.setdefault((where, what), [0, row])
    entry[0] += 1


def _problem_lines(found: dict) -> list[str]:
    out = []
    for (where, what), (n, row) in found.items():
        example = "" if row is None else f"key {row.get('key')}, run {row.get('run')}, role {row.get('role')}"
        if n > 1:
            out.append(f"{where}: {what} ({n} rows{', e.g. ' + example if example else ''})")
        else:
            out.append(f"{where}: {what}{' (' + example + ')' if example else ''}")
    return out


def _step(first_divergence) -> str | None:
    if first_divergence == -1:
        return "prompt_logprobs"
    if first_divergence == 0:
        return "prefill"
    if isinstance(first_divergence, int) and first_divergence > 0:
        return "decode"
    return None


def compare(requests: list[dict]) -> tuple[list[tuple[dict, bool]], dict]:
    """(outcomes, found problems): each compared or null row that has a reference, and whether it diverges.

    Divergent means ``digest != reference digest``, whatever the row's ``first_divergence`` says. A row's
    reference is the last ``reference`` row of its (shape, reference_arm or arm, scenario, key) read before
    it, else the first read after it. A disagreement between digest and ``first_divergence``, a compared or
    null row whose key has no reference, a key with several references one of which no row is compared
    with, a reference with a first_divergence, an unknown role, a row missing a required key and a row with
    ``tokens == 0`` are problems. A row without a reference, and a row that has no output or whose reference
    has none (``tokens == 0``: a server that did not answer), are left out of the outcomes: two missing
    outputs agree about nothing.
    """
    found: dict = {}
    refs = collections.defaultdict(list)
    usable = []  # (row, the reference read last before it, or None)
    for row in requests:
        missing = [k for k in REQUIRED if row.get(k) is None]
        where = cell_key(row.get("shape"), row.get("scenario"), row.get("arm"))
        if missing:
            _flag(found, where, f"rows missing {', '.join(missing)}", row)
            continue
        if row["role"] not in ROLES:
            _flag(found, where, f"rows with an unknown role {row['role']!r}", row)
            continue
        if row.get("tokens") == 0:
            _flag(found, where, "rows with tokens == 0", row)
        if row["role"] == "reference":
            refs[(row["shape"], row["arm"], row["scenario"], row["key"])].append(row)
            if row.get("first_divergence") is not None:
                _flag(found, where, "references with a first_divergence", row)
        else:
            group = refs.get((row["shape"], row.get("reference_arm") or row["arm"], row["scenario"], row["key"]))
            usable.append((row, group[-1] if group else None))
    outcomes, bound = [], set()
    for row, ref in usable:
        ref_arm = row.get("reference_arm") or row["arm"]
        where = cell_key(row["shape"], row["scenario"], row["arm"])
        if ref is None:
            later = refs.get((row["shape"], ref_arm, row["scenario"], row["key"]))
            if not later:
                _flag(found, where, f"{row['role']} rows without a reference (arm {ref_arm})", row)
                continue
            ref = later[0]
        bound.add(id(ref))
        if row.get("tokens") == 0 or ref.get("tokens") == 0:
            continue
        divergent = row["digest"] != ref["digest"]
        first = row.get("first_divergence")
        if divergent and first is None:
            _flag(found, where, "rows whose digest differs from the reference but first_divergence is null", row)
        elif not divergent and first is not None:
            _flag(found, where, "rows whose digest equals the reference but first_divergence is set", row)
        outcomes.append((row, divergent))
    for (shape, arm, scenario, key), group in refs.items():
        if len(group) > 1 and any(id(ref) not in bound for ref in group):
            _flag(found, cell_key(shape, scenario, arm), f"{len(group)} references for key {key}")
    return outcomes, found


def _order(names, known) -> list:
    names = set(names)
    return [n for n in known if n in names] + sorted(names - set(known))


def recompute(requests: list[dict], suite: list[dict]) -> dict:
    """The JSON summary's counts, controls and problems (without checks and header fields).

    ``cells`` and ``totals`` count ``compared`` rows only; ``controls.null`` counts ``null`` rows per
    arm. Counts of a cell that has per-request rows come from them alone; see the module docstring for
    cells that have only suite rows.
    """
    outcomes, found = compare(requests)
    cells = collections.defaultdict(lambda: [0, 0])
    null = collections.defaultdict(lambda: [0, 0])
    steps = collections.defaultdict(lambda: dict.fromkeys((*STEPS, "unlocated"), 0))
    for row, divergent in outcomes:
        k = cell_key(row["shape"], row["scenario"], row["arm"])
        counts = (cells if row["role"] == "compared" else null)[k]
        counts[0] += divergent
        counts[1] += 1
        if row["role"] == "compared" and row["arm"] in MUST_DIVERGE:
            s = steps[k]
            if divergent:
                s[_step(row.get("first_divergence")) or "unlocated"] += 1
    with_requests = {cell_key(r.get("shape"), r.get("scenario"), r.get("arm")) for r in requests}

    ran = []
    for r in suite:
        missing = [k for k in ("shape", "arm", "scenario") if r.get(k) is None]
        if missing:
            _flag(found, "suite.jsonl", f"rows missing {', '.join(missing)}")
        elif not r.get("error"):
            ran.append(r)
    claimed = collections.defaultdict(lambda: [0, 0])
    claimed_null = {}
    claimed_steps = collections.defaultdict(list)
    uncounted = set()  # cells with a suite row that states no counts: nothing to cross-check
    for r in ran:
        k = cell_key(r["shape"], r["scenario"], r["arm"])
        if r.get("comparisons") is None:
            uncounted.add(k)
        claimed[k][0] += r.get("divergent") or 0
        claimed[k][1] += r.get("comparisons") or 0
        claimed_steps[k] += r.get("first_steps") or []
        if r.get("null_comparisons") is not None:
            c = claimed_null.setdefault(k, [0, 0])
            c[0] += r.get("null_divergent") or 0
            c[1] += r["null_comparisons"]
    unverified = []
    for k, (d, c) in claimed.items():
        if k not in with_requests:
            unverified.append(k)
            cells[k] = [d, c]
            if k in claimed_null:
                null[k] = list(claimed_null[k])
            if k.rsplit("|", 1)[1] in MUST_DIVERGE:
                for step in claimed_steps[k]:
                    steps[k][_step(step) or "unlocated"] += 1
            continue
        got = cells.get(k, [0, 0])
        if k not in uncounted and [d, c] != got:
            _flag(found, k, f"suite.jsonl says {d} / {c} divergent, requests.jsonl gives {got[0]} / {got[1]}")
        if k in claimed_null and claimed_null[k] != null.get(k, [0, 0]):
            n = null.get(k, [0, 0])
            _flag(found, k, f"suite.jsonl says {claimed_null[k][0]} / {claimed_null[k][1]} null divergent, "
                            f"requests.jsonl gives {n[0]} / {n[1]}")

    totals: dict = {}
    for k, (d, c) in sorted(cells.items()):
        shape, _, arm = k.split("|")
        t = totals.setdefault(shape, {}).setdefault(arm, [0, 0])
        t[0] += d
        t[1] += c
    null_arms: dict = {}
    for k, (d, c) in null.items():
        t = null_arms.setdefault(k.split("|")[2], [0, 0])
        t[0] += d
        t[1] += c
    negative: dict = {}
    for k, (d, c) in sorted(cells.items()):
        where, arm = k.rsplit("|", 1)
        if arm in MUST_DIVERGE:
            negative.setdefault(arm, {})[where] = {"divergent": d, "compared": c, **steps[k]}
    return {
        "totals": {s: {a: totals[s][a] for a in _order(totals[s], ARMS)} for s in sorted(totals)},
        "cells": dict(sorted(cells.items())),
        "controls": {
            "null": {a: null_arms[a] for a in _order(null_arms, ARMS)},
            "negative": {a: negative[a] for a in _order(negative, ARMS)},
            "cached_tokens": _cached_tokens(ran),
            "hits": _hits(requests, outcomes),
            "overlap": _overlap(ran, cells),
            "aborted_running": _present(ran, "aborted_running"),
            "distinct_samples": _present(ran, "distinct_samples"),
        },
        "failed": [{"shape": r.get("shape"), "arm": r.get("arm"), "scenario": r.get("scenario"),
                    "error": _last_line(r["error"])} for r in suite if r.get("error")],
        "unverified": sorted(unverified),
        "problems": _problem_lines(found),
    }


def _last_line(text) -> str:
    lines = str(text).strip().splitlines()
    return lines[-1] if lines else "?"


def _cached_tokens(ran: list[dict]) -> dict:
    """{arm: max cached_tokens over its suite rows, or None where no row measured it}."""
    out: dict = {}
    for r in ran:
        v, prev = r.get("cached_tokens"), out.get(r["arm"])
        out[r["arm"]] = prev if v is None else v if prev is None else max(prev, v)
    return {a: out[a] for a in _order(out, ARMS)}


def _hits(requests: list[dict], outcomes: list[tuple[dict, bool]]) -> dict:
    """{"shape|arm": {run: {"role", "rows", "divergent", "cached": [min, max]}}}: scenario s's request rows that
    carry ``cached_tokens``, per run in the order the suite sent them (references count no divergence)."""
    divergent = {id(row): d for row, d in outcomes}
    out: dict = {}
    for r in requests:
        if r.get("scenario") != PREFIX or r.get("cached_tokens") is None or r.get("run") is None:
            continue
        cell = out.setdefault(f"{r.get('shape')}|{r.get('arm')}", {}).setdefault(
            r["run"], {"role": r.get("role"), "rows": 0, "divergent": 0, "cached": None})
        cell["rows"] += 1
        cell["divergent"] += bool(divergent.get(id(r)))
        c = r["cached_tokens"]
        cell["cached"] = [c, c] if cell["cached"] is None else [min(cell["cached"][0], c), max(cell["cached"][1], c)]
    return out


def _overlap(ran: list[dict], cells: dict) -> dict:
    """{cell: [one entry per suite row]}: the server's running-request counts against the intended ones.

    An entry is proven iff observed_max >= intended, or its row is a control arm's (``MUST_DIVERGE``) that
    diverged: overlap is there to rule out a vacuous 0, and a control that diverged, its null control clean,
    showed its co-runners' effect (``control_diverged``). A row that claims no overlap (``claims_overlap``
    false: it compares runs alone) is not judged. A cell with compared rows gets an unproven entry
    for each of its suite rows without an overlap, and one if it has no suite row at all.
    """
    out = collections.defaultdict(list)
    for r in ran:
        k = cell_key(r["shape"], r["scenario"], r["arm"])
        o = r.get("overlap")
        if r.get("claims_overlap") is False:  # its comparisons are alone against alone (scenario g)
            out[k].append({"intended": None, "observed_max": None, "claimed": False, "proven": True})
            continue
        if o is None:
            if cells.get(k, [0, 0])[1]:
                out[k].append({"intended": None, "observed_max": None, "proven": False})
            continue
        entry = {f: o.get(f) for f in ("intended", "observed_max", "observed_min", "samples")}
        entry["proven"] = (entry["intended"] is not None and entry["observed_max"] is not None
                           and entry["observed_max"] >= entry["intended"])
        if not entry["proven"] and r["arm"] in MUST_DIVERGE and r.get("divergent") and not r.get("null_divergent"):
            entry.update(proven=True, control_diverged=True)
        out[k].append(entry)
    for k, (_, c) in cells.items():
        if c and k not in out:
            out[k].append({"intended": None, "observed_max": None, "proven": False})
    return dict(sorted(out.items()))


def _present(ran: list[dict], field: str) -> dict:
    """{cell: [the field's values]} over the suite rows where it is not null."""
    out = collections.defaultdict(list)
    for r in ran:
        if r.get(field) is not None:
            out[cell_key(r["shape"], r["scenario"], r["arm"])].append(r[field])
    return dict(out)


# ---------------------------------------------------------------- checks and rendering

def checks(summary: dict) -> list[str]:
    """The suite's claims as sentences, each with the counts behind it and whether it holds."""
    out = []
    by_arm = collections.defaultdict(lambda: [0, 0])
    for arms in summary["totals"].values():
        for arm, (d, c) in arms.items():
            by_arm[arm][0] += d
            by_arm[arm][1] += c
    for arm in _order(by_arm, ARMS):
        if arm.startswith("corun"):
            d, c = by_arm[arm]
            out.append(f"{arm}: {d} divergent of {c} comparisons: {'holds' if d == 0 else 'FAILS'}")
    for arm, negative in summary["controls"]["negative"].items():
        must = MUST_DIVERGE.get(arm, ())
        for shape in sorted({k.split("|")[0] for k in negative}):
            parts, verdict = [], "holds"
            scenarios = tuple(must) + (tuple(s for s in SURFACE_MUST_DIVERGE if f"{shape}|{s}" in negative)
                                       if arm == "default" else ())
            for s in scenarios:
                v = negative.get(f"{shape}|{s}")
                if v is None:
                    parts.append(f"{s} not run")
                    continue
                parts.append(f"{s} {v['divergent']} / {v['compared']} ({v['decode']} after step 0)")
                if not v["divergent"]:
                    verdict = "FAILS"
            if all(p.endswith("not run") for p in parts):
                continue  # e.g. the HTTP rows: no negative-control scenario there
            out.append(f"{shape}, {CONTROL_NAMES.get(arm, arm)} diverges in {', '.join(scenarios)}: {', '.join(parts)}: "
                       f"{verdict}")
    null = summary["controls"]["null"]
    if null:
        bad = [f"{a} {d} / {c}" for a, (d, c) in null.items() if d]
        total = sum(c for _, c in null.values())
        out.append(f"null control: {'0 divergent' if not bad else ', '.join(bad) + ' divergent'} of {total} "
                   f"on {len(null)} arm{'' if len(null) == 1 else 's'}: {'holds' if not bad else 'FAILS'}")
    else:
        out.append("null control: not run")
    overlap = summary["controls"]["overlap"]
    unproven = [k for k, entries in overlap.items() if not all(e["proven"] for e in entries)]
    if not unproven:
        out.append(f"overlap: proven in all {len(overlap)} cells")
    else:
        where = collections.defaultdict(list)
        for k in unproven:
            shape, scenario, arm = k.split("|")
            where[shape].append(f"{scenario}/{arm}")
        detail = "; ".join(f"{shape}: {', '.join(v)}" if len(unproven) <= 12 else f"{shape}: {len(v)}"
                           for shape, v in where.items())
        out.append(f"overlap: NOT PROVEN in {len(unproven)} of {len(overlap)} cells ({detail})")
    for f in summary["failed"]:
        if f.get("scenario") in (None, "start"):
            out.append(f"{f['shape']}: the {f['arm']} arm did not start ({f['error']})")
        else:  # a server that exited in a scenario (the suite started it again)
            out.append(f"{f['shape']}, {f['scenario']}: the {f['arm']} arm failed: {f['error']}")
    n = len(summary["problems"])
    out.append("consistency: no problems" if not n else f"consistency: {n} problems (see Consistency)")
    return out


def _count(v, marked: bool = False) -> str:
    return "-" if v is None else f"{v[0]} / {v[1]}{'*' if marked else ''}"


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| --- | " + " | ".join("---:" for _ in header[1:]) + " |"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows] + [""]


def _grid(keyed: dict) -> dict:
    """{shape: {scenario: {arm: value}}} from {"shape|scenario|arm": value}."""
    out: dict = {}
    for k, v in keyed.items():
        shape, scenario, arm = k.split("|")
        out.setdefault(shape, {}).setdefault(scenario, {})[arm] = v
    return out


def _scenario_table(scenarios: dict, show, label=lambda s: s) -> list[str]:
    """A scenario x arm table of one shape: ``show(scenario, arm, value or None)`` fills each cell."""
    arms = _order({a for v in scenarios.values() for a in v}, ARMS)
    return _table(["scenario", *arms], [[label(s), *(show(s, a, scenarios[s].get(a)) for a in arms)]
                                        for s in _order(scenarios, SCENARIOS)])


def _overlap_cell(entries: list[dict] | None) -> str:
    if not entries:
        return "-"
    shown = []
    for e in entries:
        if e.get("claimed") is False:
            shown.append("not claimed")
        elif e["observed_max"] is None or e["intended"] is None:
            shown.append("**NOT PROVEN** (not measured)")
        elif e.get("control_diverged"):
            shown.append(f"{e['observed_max']} < {e['intended']}, diverged")
        elif e["proven"]:
            shown.append(f"{e['observed_max']} >= {e['intended']}")
        else:
            shown.append(f"**{e['observed_max']} < {e['intended']}: NOT PROVEN**")
    return ", ".join(dict.fromkeys(shown))


def _header(summary: dict, title: str, notes) -> list[str]:
    lines = [f"# {title}", ""]
    if summary.get("commit"):
        lines += [f"Commit: `{summary['commit']}`", ""]
    if summary.get("host"):
        lines += [f"Host: {summary['host']}", ""]
    lines += ["Commands:", ""] + [f"    {c}" for c in summary.get("commands", [])] + [""]
    for n in notes:
        lines += [n, ""]
    sources = summary.get("sources")
    if sources:
        def files(stem):
            return ", ".join(f"`{p}` ({n})" for p, n in sources[stem].items()) or "none"
        skipped = ", ".join(f"`{p}`" for p in sources.get("skipped", []))
        lines += [f"Rows (under `{sources.get('root', '.')}`): requests {files('requests')}; suite {files('suite')}."
                  + (f" Skipped as concatenations of the files below them: {skipped}." if skipped else ""), ""]
    return lines + ["Every cell is divergent / compared: outputs whose digest (token ids and logprob bit "
                    "patterns) differs from the same request served alone.", ""]


def _totals(summary: dict) -> list[str]:
    totals, unverified = summary["totals"], set(summary.get("unverified", []))
    arms = _order({a for by_arm in totals.values() for a in by_arm}, ARMS)

    def marked(shape, arm):
        return any(k.split("|")[0] == shape and k.split("|")[2] == arm for k in unverified)

    lines = ["## Totals", ""] + _table(["model", *arms], [
        [shape, *(_count(totals[shape].get(a), marked(shape, a)) for a in arms)] for shape in totals])
    corun = [v for by_arm in totals.values() for a, v in by_arm.items() if a.startswith("corun")]
    lines += [f"Under the `corun*` arms: {sum(d for d, _ in corun)} divergent of {sum(c for _, c in corun)} "
              "comparisons.", ""]
    configs = summary.get("configs") or {}
    if configs:
        lines += [f"- `{a}`: " + ", ".join(f"`{c}`" if c else "(no flags)" for c in v) for a, v in configs.items()]
        lines.append("")
    return lines


def _shapes(summary: dict) -> list[str]:
    unverified, lines = set(summary.get("unverified", [])), []
    for shape, scenarios in _grid(summary["cells"]).items():
        lines += [f"## {shape}", ""] + _scenario_table(
            scenarios, lambda s, a, v: _count(v, cell_key(shape, s, a) in unverified),
            lambda s: f"{s}. {SCENARIOS[s]}" if s in SCENARIOS else s)
    if unverified:
        lines += ["\\* from suite.jsonl alone: no per-request rows to recompute the count from (and its "
                  "first_steps, which the negative control below splits, keep at most 50 steps).", ""]
    return lines


def _controls(summary: dict) -> list[str]:
    controls, unverified = summary["controls"], set(summary.get("unverified", []))
    lines = ["## Controls", "", "Null control (the request alone a second time against its reference; "
             "0 expected on every arm):", ""]
    null = [[a, _count(v)] for a, v in controls["null"].items()]
    lines += _table(["arm", "null divergent / compared"], null) if null else ["Not run.", ""]
    if not controls["negative"]:
        lines += ["Negative control: not run.", ""]
    for arm, negative in controls["negative"].items():
        lines += [f"Negative control, {CONTROL_NAMES.get(arm, arm)} (`{arm}`), which must diverge in "
                  f"{', '.join(MUST_DIVERGE.get(arm, ()))}: where the divergent outputs first differ.", ""]
        rows = [[k.replace("|", ", "), _count([v["divergent"], v["compared"]], f"{k}|{arm}" in unverified),
                 v["prefill"], v["decode"], v["prompt_logprobs"]] for k, v in negative.items()]
        lines += _table(["model, scenario", "divergent / compared", "step 0 (prefill)", "steps >= 1 (decode)",
                         "prompt logprobs (-1)"], rows)
    lines += ["Prefix cache: the most prompt tokens any reply of the arm took from the cache (0 expected on an "
              "arm without one; `corun-prefix` serves only the hits its rules allow, checked reply by reply).", ""]
    cached = [[a, "not measured" if v is None else v] for a, v in controls["cached_tokens"].items()]
    lines += _table(["arm", "max cached tokens"], cached) if cached else ["Not measured.", ""]
    for where, by_run in controls.get("hits", {}).items():
        lines += [f"Prefix-cache hits in scenario {PREFIX}, {where.replace('|', ', ')}: the prompt tokens each reply took "
                  "from the cache, and the replies that differ from their cold reference.", ""]
        lines += _table(["run", "role", "replies", "cached tokens (min-max)", "divergent"], [
            [run, v["role"], v["rows"], f"{v['cached'][0]}-{v['cached'][1]}" if v["cached"][0] != v["cached"][1]
             else v["cached"][0], "-" if v["role"] == "reference" else v["divergent"]] for run, v in by_run.items()])
    lines += ["Overlap: the most requests the server reported running while the compared ones were in "
              "flight, against the co-runners the scenario intends.", ""]
    for shape, scenarios in _grid(controls["overlap"]).items():
        if all(e["observed_max"] is None for v in scenarios.values() for es in v.values() for e in es):
            lines += [f"{shape}: not measured in any cell: **NOT PROVEN**.", ""]
        else:
            lines += [f"{shape}:", ""] + _scenario_table(scenarios, lambda s, a, v: _overlap_cell(v))
    for field, text in (("aborted_running", "Co-runners aborted while running"),
                        ("distinct_samples", "Distinct samples among the n of one request")):
        grouped: dict = {}
        for k, values in controls[field].items():
            shape, scenario, arm = k.split("|")
            grouped.setdefault(f"{shape}, {scenario}", []).append(f"{arm} {', '.join(map(str, values))}")
        if grouped:
            lines += [f"{text}:", ""] + [f"- {k}: {'; '.join(v)}" for k, v in grouped.items()] + [""]
    return lines


def render(summary: dict, title: str = "Determinism suite", notes=()) -> str:
    """The markdown report: a function of the JSON summary (plus title and notes) alone."""
    lines = _header(summary, title, notes) + _totals(summary) + _shapes(summary) + _controls(summary)
    lines += ["## Checks", ""] + [f"- {c}" for c in summary.get("checks") or checks(summary)] + [""]
    lines += ["## Consistency", ""] + ([f"- {p}" for p in summary["problems"]] or ["None."])
    return "\n".join(lines) + "\n"


def configs(requests: list[dict]) -> dict:
    """{arm: [the distinct server configs its rows name]}."""
    out: dict = {}
    for r in requests:
        if r.get("arm") is not None and r.get("config") is not None:
            seen = out.setdefault(r["arm"], [])
            if r["config"] not in seen:
                seen.append(r["config"])
    return {a: out[a] for a in _order(out, ARMS)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--out", default="docs/results/determinism.md")
    parser.add_argument("--title", default="Determinism suite")
    parser.add_argument("--commit", default="", help="the commit the rows were made at")
    parser.add_argument("--command", action="append", help="a command that made the rows (repeatable)")
    parser.add_argument("--host", default="")
    parser.add_argument("--note", action="append", default=[], help="a paragraph under the commands (repeatable)")
    args = parser.parse_args(argv)
    root, out = Path(args.results), Path(args.out)
    requests, suite, sources, problems = load(root)
    sources["root"] = os.path.relpath(root.resolve(), out.resolve().parent)
    summary = {"commit": args.commit, "host": args.host,
               "commands": args.command or ["scripts/determinism_suite.sh"], "sources": sources,
               "configs": configs(requests), **recompute(requests, suite)}
    summary["problems"] = problems + summary["problems"]
    summary["checks"] = checks(summary)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(summary, args.title, args.note))
    # one [divergent, compared] pair a line
    text = re.sub(r"\[\s+(-?\d+),\s+(-?\d+)\s+\]", r"[\1, \2]", json.dumps(summary, indent=1))
    out.with_suffix(".json").write_text(text + "\n")
    print(out.read_text())
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
