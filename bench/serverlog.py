"""Decode-step samples and prefill batches from an SGLang server log: what one decode step costs at
each load, and how many prefill iterations a run took.

Every ``--decode-log-interval`` (40) decode steps SGLang logs ``Decode batch, #running-req: R, ...,
gen throughput (token/s): G``, where G is the tokens generated over the wall time since the previous
such line. A sample ``[R, G]`` therefore stands for 40 steps of about R requests each, and
``R / G`` is the wall time of one step, prefill iterations in between included. The first sample
after an idle server spans the idle time too, so the first sample of every run is dropped.

SGLang logs every prefill iteration as ``Prefill batch, #new-seq: S, #new-token: T, ...``: one line
per forward pass, a chunk of a long prompt included (S counts the chunked prompt in each of its
chunks). A run's ``[S, T]`` pairs (``prefill_batches``) count its prefill iterations and the prompts
each held; their T sum to the run's prompt tokens where nothing came from the prefix cache.

``python -m bench.serverlog RUNS LOGS`` fills ``decode_steps`` and ``prefill_batches`` into the rows
of RUNS that lack them, from the arm logs ``LOGS/STUDY-ARM.log`` (or ``LOGS/ARM.log`` in a logs
folder without study names), matching each row's run window with the log's timestamps
(1 s resolution, UTC unless ``--log-utc-offset-hours``). A row keeps lacking what its window of the
log does not hold (its log gone or from another run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
from pathlib import Path

LINE = re.compile(
    r"^\[(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})[^\]]*\] Decode batch[^,]*, "
    r"#running-req: (?P<running>\d+),.*gen throughput \(token/s\): (?P<tps>[\d.]+)"
)
PREFILL_LINE = re.compile(
    r"^\[(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})[^\]]*\] Prefill batch[^,]*, "
    r"#new-seq: (?P<seqs>\d+), #new-token: (?P<tokens>\d+),"
)
KV_LINE = re.compile(r"Decode batch.*#token: (?P<tokens>\d+),")
PROFILE_LINE = re.compile(r"Profiling starts[^.]*\. Traces will be saved to: (?P<dir>\S+)")
#: Steps per logged sample (SGLang's ``--decode-log-interval`` default, which the benchmarks keep).
STEPS_PER_SAMPLE = 40


def samples(text: str, utc_offset_hours: float = 0.0) -> list[tuple[float, int, float]]:
    """``(unix time, running requests, tokens/s)`` of every decode-batch line of ``text``."""
    tz = datetime.timezone(datetime.timedelta(hours=utc_offset_hours))
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            out.append((_time(m["time"], tz), int(m["running"]), float(m["tps"])))
    return out


def _time(stamp: str, tz: datetime.tzinfo) -> float:
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz).timestamp()


def prefills(text: str, utc_offset_hours: float = 0.0) -> list[tuple[float, int, int]]:
    """``(unix time, new prompts, new tokens)`` of every prefill-batch line of ``text``."""
    tz = datetime.timezone(datetime.timedelta(hours=utc_offset_hours))
    return [(_time(m["time"], tz), int(m["seqs"]), int(m["tokens"]))
            for m in map(PREFILL_LINE.match, text.splitlines()) if m]


def prefill_batches(text: str) -> list[list[int]]:
    """``[[new prompts, new tokens], ...]``: one pair per prefill iteration of one run's share of a log."""
    return [[s, t] for _, s, t in prefills(text)]


def decode_steps(text: str) -> list[list[float]]:
    """``[[running, tokens/s], ...]`` of one run's share of a log, its first sample dropped."""
    return [[r, g] for _, r, g in samples(text)[1:] if g > 0]


def kv_at_profiles(text: str) -> dict[str, int | None]:
    """Per profile a log starts (keyed by its trace folder): the KV tokens held (``#token``) in the
    first decode-batch line after it (one comes every 40 steps: within the profiled steps), or None
    where none followed."""
    out, waiting = {}, []
    for line in text.splitlines():
        if m := PROFILE_LINE.search(line):
            out[m["dir"]] = None
            waiting.append(m["dir"])
        elif waiting and (m := KV_LINE.search(line)):
            for d in waiting:
                out[d] = int(m["tokens"])
            waiting = []
    return out


def decode_wave(concurrency: int, steps: list[list[float]]) -> int:
    """The first wave of a run: the most requests the server ran at once before that count first fell
    (its log's decode samples ``[running, tokens/s]``), at most the concurrency; the concurrency where
    the log has no sample. Fewer than the concurrency where the KV pool holds fewer, or the server
    keeps a slot back. A fall is a request that ended or was retracted: requests admitted after it are
    not the first wave, even where more then run at once, and the requests past the wave wait for
    room, so they do not shorten its decode phase (``client.decode_phase_window``)."""
    most = 0
    for running, _ in steps:
        if running < most:
            break
        most = int(running)
    return min(concurrency, most) if steps else concurrency


#: A decode sample counts as the whole first wave's when at least this share of the wave ran in it
#: (one of its requests may finish a step or two before the others).
FULL_WAVE = 0.98


def full_wave_throughput(steps: list[list[float]], wave: int, seconds: float | None, least: int = 2) -> float | None:
    """The server's own decode throughput while the first wave decodes, for a decode phase of
    ``seconds`` (``client.decode_phase_window``): the median tokens/s of the first samples with at
    least ``FULL_WAVE`` of ``wave`` running, as many as fit in the phase (each spans
    ``STEPS_PER_SAMPLE`` steps of ``running / tokens/s`` seconds), given ``least`` of them; else None.
    Within the phase no request of the wave ends; the median keeps out a sample that something else
    slowed (a pause, a prefill let in beside a wave the KV pool capped). Unlike the client's chunk
    timings, the measure does not depend on how fast the client reads its streams."""
    if seconds is None or seconds <= 0:
        return None
    kept, span = [], 0.0
    for running, tps in steps:
        if running < FULL_WAVE * wave:
            if kept:
                break
            continue
        span += STEPS_PER_SAMPLE * running / tps
        if span > seconds:
            break
        kept.append(tps)
    return statistics.median(kept) if len(kept) >= least else None


def step_ms(steps: list[list[float]], lo: int, hi: int) -> float | None:
    """Median wall time of one decode step over the samples with ``lo <= running <= hi``."""
    ms = [1e3 * r / g for r, g in steps if lo <= r <= hi]
    return statistics.median(ms) if ms else None


def seconds(steps: list[list[float]], lo: int, hi: int) -> float:
    """Wall time the samples with ``lo <= running <= hi`` stand for."""
    return sum(STEPS_PER_SAMPLE * r / g for r, g in steps if lo <= r <= hi)


def prompt_tokens(row: dict) -> int | None:
    """A run's prompt tokens: the sum of its timeline's prefill column (bench/client.py ``timeline``, bins
    of 1 s), None for a row without a timeline."""
    timeline = row.get("timeline")
    return round(sum(b[1] for b in timeline)) if timeline else None


def run_prefills(window: list[list[int]], tokens: int | None) -> list[list[int]]:
    """The prefill batches of a run among those of its time window (1 s resolution: the window can
    also hold the server's warm-up just before): the last ones whose tokens sum to the run's prompt
    ``tokens``; none where no such run of them ends the window, or ``tokens`` is unknown."""
    if tokens is None:
        return []
    total = 0
    for k in range(len(window) - 1, -1, -1):
        total += window[k][1]
        if total == tokens:
            return window[k:]
        if total > tokens:
            break
    return []


def log_name(study: str, arm: str) -> str:
    """An arm's server log in a logs folder: one per study and arm, so that a later study's server of
    the same arm does not replace it."""
    return f"{study}-{arm}.log" if study else f"{arm}.log"


def log_path(logs: Path, row: dict) -> Path:
    """The server log of a row: ``log_name`` of its study and arm, or ``ARM.log`` where only that one is there."""
    named = logs / log_name(row.get("study") or "", row["arm"])
    return named if named.exists() else logs / f"{row['arm']}.log"


def backfill(rows: list[dict], logs: Path, utc_offset_hours: float = 0.0) -> int:
    """Set ``decode_steps`` and ``prefill_batches`` on rows without them from their arm's log (``log_path``);
    return how many rows got either. ``prefill_batches`` is set only where the row's window ends in
    prefill lines whose tokens sum to the run's prompt tokens (``run_prefills``): a window without them
    is another run's log."""
    cache: dict[Path, tuple[list, list]] = {}
    filled = 0
    for row in rows:
        if "decode_steps" in row and "prefill_batches" in row:
            continue
        path = log_path(logs, row)
        if not path.exists():
            continue
        if path not in cache:
            text = path.read_text(errors="replace")
            cache[path] = samples(text, utc_offset_hours), prefills(text, utc_offset_hours)
        decode, prefill = cache[path]
        end = row["time"]
        start = end - row["duration_s"]
        window = [(r, g) for t, r, g in decode if start - 1 <= t <= end + 1]
        batches = run_prefills([[s, n] for t, s, n in prefill if start - 1 <= t <= end + 1], prompt_tokens(row))
        got = False
        if "decode_steps" not in row:
            row["decode_steps"] = [[r, g] for r, g in window[1:] if g > 0]
            got = True
        if "prefill_batches" not in row and batches:
            row["prefill_batches"] = batches
            got = True
        filled += got
    return filled


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="JSON lines written by bench/run.py, rewritten in place")
    parser.add_argument("logs", help="the folder of the arms' server logs (STUDY-ARM.log or ARM.log)")
    parser.add_argument("--log-utc-offset-hours", type=float, default=0.0)
    args = parser.parse_args(argv)
    path = Path(args.runs)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    filled = backfill(rows, Path(args.logs), args.log_utc_offset_hours)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{filled} rows given decode_steps or prefill_batches")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
