"""Two ``--corun`` replicas behind SGLang's router, on one GPU: does every routed request give the bits a
single server gives it, under each routing policy, when a replica is lost mid-run, and once it is back?

usage (GPU host, repository root; ``scripts/replicas_check.sh`` runs it):
    python -m bench.replicas --out results/replicas [--shape qwen3-small] [--requests 32]

1. A single ``--corun`` server answers every request (``build_requests``: seeded native ``/generate`` and
   OpenAI chat completions, streamed and not): the reference, one generation per request.
2. Two replicas start with the same options (each its own static memory, one KV pool size) and the
   calibration cache the single server filled; their ``system_fingerprint`` must equal its.
3. For each policy, a router (``python -m sglang_router.launch_router``, with the retry, circuit-breaker
   and health options of ``docker/compose.replicas.yaml``) fronts them; the requests go through it one
   after another (each attributed to the replica whose ``sglang:num_requests_total`` grew: the router
   does not say which served) and then all at once (per-replica totals only).
4. With the compose file's policy, all requests are sent at once and replica-1 is killed (SIGKILL of its
   process group) once streams are under way. A request that fails or whose stream ends early is sent
   again by the client, as docs/deployment.md tells clients to; a cut stream's tokens must be a prefix
   of the reference. Every request must complete with the reference's bits.
5. Replica-1 restarts on its port; after the router takes it back (``--readmit-wait``), the requests go
   through one after another again: the reference's bits, and some served by the restarted replica.

Every request's outcome is a row of ``replicas.json`` in ``--out`` (its digest, the reference's, the first
divergent step, who served it, its attempts), with a summary (``summarize``); server and router logs lie
beside it. Exit status 0 when every check holds, 1 otherwise.

The pure parts (requests, stream readers, metric parsing, attribution, comparison, aggregation, the
router's command line) are tested on the CPU in ``tests/bench/test_replicas.py``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from corun_sglang.core.compare import Generation, digest, first_divergence
from corun_sglang.probes import generate, harness
from corun_sglang.probes.harness import CHAT, GENERATE

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker" / "compose.replicas.yaml"
#: The kinds of request, in turn: (route, streamed).
KINDS = ((GENERATE, False), (GENERATE, True), (CHAT, False), (CHAT, True))
#: Sampling temperatures, in turn (three, so each kind meets each temperature); 0 is greedy.
TEMPERATURES = (0.6, 1.0, 0.0)
MODEL = "synthetic"
POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
#: The counter of finished requests on a replica's ``/metrics`` (``--enable-metrics``).
REQUESTS_COUNTER = "sglang:num_requests_total"
RUNNING_GAUGE = "sglang:num_running_reqs"


# ---------------------------------------------------------------------------------------------- requests

@dataclasses.dataclass(frozen=True)
class Req:
    key: str
    route: str
    stream: bool
    seed: int
    body: dict


def build_requests(count: int, seed: int, max_new_tokens: int, vocab: int = generate.VOCAB,
                   model: str = MODEL) -> list[Req]:
    """``count`` seeded requests, a function of ``seed``: the kinds of ``KINDS`` in turn, each with a seed
    of its own in [0, 2**63) and its output logprobs asked for, ``ignore_eos`` so it runs its
    ``max_new_tokens``. Native ones send token-id prompts, chat ones text of ``generate.WORDS``."""
    rnd = random.Random(seed)
    prompts = generate.token_prompts(count, 16, 256, seed, vocab)
    out = []
    for i in range(count):
        route, stream = KINDS[i % len(KINDS)]
        sample_seed = rnd.getrandbits(63)
        temperature = TEMPERATURES[i % len(TEMPERATURES)]
        if route == GENERATE:
            body = {"input_ids": prompts[i], "return_logprob": True, "stream": stream, "sampling_params": {
                "max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": 0.95,
                "ignore_eos": True, "sampling_seed": sample_seed}}
        else:
            text = " ".join(rnd.choice(generate.WORDS) for _ in range(rnd.randint(8, 64)))
            body = {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream,
                    "max_tokens": max_new_tokens, "temperature": temperature, "top_p": 0.95, "seed": sample_seed,
                    "logprobs": True, "ignore_eos": True}
        kind = ("gen" if route == GENERATE else "chat") + ("-stream" if stream else "")
        out.append(Req(f"{i:03d}-{kind}", route, stream, sample_seed, body))
    return out


# ---------------------------------------------------------------------------------------------- replies

@dataclasses.dataclass
class Outcome:
    """One attempt at a request: its generation so far (None: nothing came back), whether it ended as a
    finished request does (``ended``), the HTTP status, the ``system_fingerprint`` and ``sampling_seed`` it carried."""
    generation: Generation | None
    finished: bool
    status: int | None = None
    fingerprint: str | None = None
    sampling_seed: int | None = None
    error: str | None = None


def ended(finish_reason) -> bool:
    """Whether a reply's ``finish_reason`` (native: a dict with ``type``; OpenAI: a string) says it ended
    as a request does: not absent, not an abort (a replica stopping answers what it holds so)."""
    kind = finish_reason.get("type") if isinstance(finish_reason, dict) else finish_reason
    return kind is not None and kind != "abort"


def generate_outcome(body, status: int = 200) -> Outcome:
    """A native ``/generate`` reply (not streamed)."""
    if status != 200 or not isinstance(body, dict) or "meta_info" not in body:
        return Outcome(None, False, status, error=json.dumps(body)[:500])
    meta = body["meta_info"]
    gen = Generation.of_reply(body)
    return Outcome(gen, ended(meta.get("finish_reason")), status, meta.get("system_fingerprint"),
                   meta.get("sampling_seed"))


def chat_outcome(body, status: int = 200) -> Outcome:
    """An OpenAI chat completion (not streamed)."""
    if status != 200 or not isinstance(body, dict) or not body.get("choices"):
        return Outcome(None, False, status, error=json.dumps(body)[:500])
    choice = body["choices"][0]
    return Outcome(harness.chat_generation(choice), ended(choice.get("finish_reason")), status,
                   body.get("system_fingerprint"), choice.get("sampling_seed"))


def read_generate_stream(events: Iterable[dict], status: int = 200) -> Outcome:
    """A streamed native ``/generate``: its events (``data:`` payloads) in order. SGLang sends each
    event's logprobs cumulatively (or only the new ones, with ``--incremental-streaming-output``: an
    event whose list is shorter than its ``completion_tokens`` adds to the earlier ones)."""
    steps: list = []
    out = Outcome(None, False, status)
    for event in events:
        if "error" in event or "meta_info" not in event:
            out.error = json.dumps(event)[:500]
            break
        meta = event["meta_info"]
        new = meta.get("output_token_logprobs") or []
        steps = list(new) if len(new) == meta.get("completion_tokens", len(new)) else steps + list(new)
        out.finished = ended(meta.get("finish_reason"))
        out.fingerprint = meta.get("system_fingerprint", out.fingerprint)
        out.sampling_seed = meta.get("sampling_seed", out.sampling_seed)
    if steps or out.finished:
        out.generation = Generation.of([s[1] for s in steps], [s[0] for s in steps])
    return out


def read_chat_stream(events: Iterable[dict], status: int = 200) -> Outcome:
    """A streamed chat completion: each event brings the logprobs of its new tokens; the one that
    finishes carries ``finish_reason``."""
    steps: list[tuple[int, float]] = []
    out = Outcome(None, False, status)
    for event in events:
        if "error" in event:
            out.error = json.dumps(event)[:500]
            break
        out.fingerprint = event.get("system_fingerprint", out.fingerprint)
        for choice in event.get("choices") or []:
            steps += harness.chat_steps(choice)
            out.sampling_seed = choice.get("sampling_seed", out.sampling_seed)
            out.finished = out.finished or ended(choice.get("finish_reason"))
    if steps or out.finished:
        out.generation = Generation.of([t for t, _ in steps], [x for _, x in steps])
    return out


def sse_events(lines: Iterable[str]) -> Iterable[dict]:
    """The JSON payloads of an SSE body's ``data:`` lines, up to ``[DONE]``."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            return
        try:
            yield json.loads(data)
        except ValueError:
            yield {"error": f"not JSON: {data[:200]}"}


# ---------------------------------------------------------------------------------------------- metrics

def parse_counter(text: str, name: str) -> float:
    """The sum over label sets of metric ``name`` in a Prometheus text exposition (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        rest = line[len(name):]
        if rest[:1] not in ("{", " "):
            continue  # another metric whose name starts with this one
        try:
            total += float(rest.rsplit(" ", 1)[-1])
        except ValueError:
            pass
    return total


def served_by(before: dict[str, float], after: dict[str, float]) -> str | None:
    """The one replica whose request counter grew between two reads; None when none or several did."""
    grew = [name for name in after if after[name] > before.get(name, 0.0)]
    return grew[0] if len(grew) == 1 else None


# ---------------------------------------------------------------------------------------------- results

def is_prefix(partial: Generation, full: Generation) -> bool:
    """Whether ``partial`` (a cut stream) is ``full``'s first tokens, bit for bit."""
    step = first_divergence(partial, full)
    return step is None or step >= len(partial.tokens)


def row(req: Req, outcome: Outcome, reference: Generation | None, *, phase: str, policy: str | None,
        served: str | None = None, attempts: int = 1, partials: Iterable[Generation] = ()) -> dict:
    """One request's result: completed, equal to the reference bit for bit (``first_divergence``), and
    what the reply carried."""
    gen = outcome.generation
    completed = outcome.finished and gen is not None
    step = first_divergence(gen, reference) if completed and reference is not None else None
    return {
        "phase": phase, "policy": policy, "key": req.key, "route": req.route, "stream": req.stream,
        "served_by": served, "attempts": attempts, "completed": completed, "status": outcome.status,
        "tokens": len(gen.tokens) if gen else 0,
        "digest": digest(gen) if completed else None,
        "reference": digest(reference) if reference is not None else None,
        "first_divergence": step,
        "equal": completed and reference is not None and step is None,
        "fingerprint": outcome.fingerprint,
        "seed_returned": outcome.sampling_seed == req.seed,
        "cut_streams": [len(p.tokens) for p in partials],
        "cut_streams_are_prefixes": all(is_prefix(p, reference) for p in partials) if reference else None,
        "error": outcome.error,
    }


def summarize(rows: list[dict], fingerprints: dict[str, str | None]) -> dict:
    """Per phase: requests, completed, equal to the reference, requests per replica, client retries; and
    whether every check holds (``ok``)."""
    phases: dict[str, dict] = {}
    for r in rows:
        name = r["phase"] if r["policy"] is None else f"{r['phase']}/{r['policy']}"
        p = phases.setdefault(name, {"requests": 0, "completed": 0, "equal": 0, "seed_returned": 0,
                                     "served_by": collections.Counter(), "client_retries": 0,
                                     "client_retries_not_streamed": 0, "cut_streams": 0,
                                     "cut_streams_not_prefixes": 0, "fingerprints": set()})
        p["requests"] += 1
        p["completed"] += r["completed"]
        p["equal"] += r["equal"]
        p["seed_returned"] += r["seed_returned"]
        if r["served_by"]:
            p["served_by"][r["served_by"]] += 1
        p["client_retries"] += r["attempts"] - 1
        if not r["stream"]:
            p["client_retries_not_streamed"] += r["attempts"] - 1
        p["cut_streams"] += len(r["cut_streams"])
        p["cut_streams_not_prefixes"] += r["cut_streams_are_prefixes"] is False
        if r["fingerprint"]:
            p["fingerprints"].add(r["fingerprint"])
    values = {v for v in fingerprints.values()}
    seen = set().union(*(p["fingerprints"] for p in phases.values())) if phases else set()
    for p in phases.values():
        p["served_by"] = dict(sorted(p["served_by"].items()))
        p["fingerprints"] = sorted(p["fingerprints"])
    return {
        "phases": phases,
        "fingerprints": fingerprints,
        "fingerprints_agree": len(values) == 1 and None not in values and seen <= values,
        "all_completed": all(r["completed"] for r in rows),
        "all_equal": all(r["equal"] for r in rows if r["phase"] != "single"),
        "cut_streams_are_prefixes": all(r["cut_streams_are_prefixes"] is not False for r in rows),
        "ok": bool(rows) and all(r["completed"] for r in rows)
        and all(r["equal"] for r in rows if r["phase"] != "single")
        and all(r["cut_streams_are_prefixes"] is not False for r in rows)
        and len(values) == 1 and None not in values and seen <= values,
    }


# ---------------------------------------------------------------------------------------------- router

def compose_router(path: Path = COMPOSE) -> tuple[str, list[str]]:
    """The router's policy and its other options (retries, circuit breaker, health checks) in the compose
    file: its command without ``--host``, ``--port``, ``--worker-urls`` and ``--policy``."""
    import yaml

    command = [str(a) for a in yaml.safe_load(path.read_text())["services"]["router"]["command"]]
    policy, options, i = None, [], 0
    while i < len(command):
        arg = command[i]
        if arg in ("--host", "--port", "--policy"):
            policy = command[i + 1] if arg == "--policy" else policy
            i += 2
        elif arg == "--worker-urls":
            i += 1
            while i < len(command) and not command[i].startswith("--"):
                i += 1
        else:
            options.append(arg)
            i += 1
    return policy, options


#: The router's launcher: SGLang's router (the ``router`` extra); ``smg.launch_router`` takes the same options.
ROUTER_MODULE = "sglang_router.launch_router"


def router_command(worker_urls: list[str], policy: str, port: int, options: list[str],
                   module: str = ROUTER_MODULE) -> list[str]:
    return [sys.executable, "-m", module, "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", *worker_urls, "--policy", policy, *options]


class Router:
    """The router (``router_command``) in a subprocess of its own session, ready once ``/readiness`` (or,
    where it has none, ``/health``) answers 200."""

    def __init__(self, worker_urls: list[str], policy: str, options: list[str], log: Path, timeout: float = 300,
                 module: str = ROUTER_MODULE):
        import httpx

        from corun_sglang.probes.launch import _free_port

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = router_command(worker_urls, policy, self.port, options, module)
        self._out = open(log, "a")
        self.proc = subprocess.Popen(self.command, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"router exited with {self.proc.returncode}; log: {log}")
            try:
                status = httpx.get(self.url + "/readiness", timeout=5).status_code
                if status == 404:  # a router without a readiness route
                    status = httpx.get(self.url + "/health", timeout=5).status_code
                if status == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise TimeoutError(f"router not ready after {timeout}s; log: {log}")

    def workers(self) -> object:
        import httpx

        try:
            return httpx.get(self.url + "/workers", timeout=10).json()
        except (httpx.HTTPError, ValueError) as e:
            return {"error": str(e)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._out.close()


# ---------------------------------------------------------------------------------------------- client

def send(url: str, req: Req, on_event: Callable[[], None] | None = None, timeout: float = 900) -> Outcome:
    """One attempt at ``req`` against ``url`` (a server or the router)."""
    import httpx

    try:
        with httpx.Client(timeout=timeout) as client:
            if not req.stream:
                reply = client.post(url + req.route, json=req.body)
                try:
                    body = reply.json()
                except ValueError:
                    body = reply.text[:500]
                read = generate_outcome if req.route == GENERATE else chat_outcome
                return read(body, reply.status_code)
            with client.stream("POST", url + req.route, json=req.body) as reply:
                if reply.status_code != 200:
                    return Outcome(None, False, reply.status_code, error=reply.read().decode(errors="replace")[:500])
                events, cut = [], None
                try:
                    for event in sse_events(reply.iter_lines()):
                        events.append(event)
                        if on_event:
                            on_event()
                except httpx.HTTPError as e:  # the stream broke off: what came before it still counts
                    cut = f"{type(e).__name__}: {e}"
                read = read_generate_stream if req.route == GENERATE else read_chat_stream
                out = read(events, reply.status_code)
                out.error = out.error or cut
                return out
    except httpx.HTTPError as e:  # the connection closed mid-body, or never opened
        return Outcome(None, False, None, error=f"{type(e).__name__}: {e}")


def send_until_done(url: str, req: Req, attempts: int, on_event=None, pause: float = 2.0):
    """``req`` sent until it completes, as a client that retries a failed or cut request does: the last
    outcome, the number of attempts, and the cut streams' generations on the way."""
    partials = []
    for attempt in range(1, attempts + 1):
        out = send(url, req, on_event)
        if out.finished and out.generation is not None:
            return out, attempt, partials
        if out.generation is not None:
            partials.append(out.generation)
        time.sleep(pause)
    return out, attempts, partials


def counters(urls: dict[str, str], name: str = REQUESTS_COUNTER) -> dict[str, float]:
    import httpx

    values = {}
    for replica, url in urls.items():
        try:
            values[replica] = parse_counter(httpx.get(url + "/metrics", timeout=10).text, name)
        except httpx.HTTPError:
            values[replica] = 0.0
    return values


def one_by_one(router: str, reqs: list[Req], replicas: dict[str, str]) -> list[tuple[Req, Outcome, str | None]]:
    """Each request alone through the router, attributed by the replicas' request counters."""
    out = []
    for req in reqs:
        before = counters(replicas)
        outcome = send(router, req)
        who = None
        for _ in range(20):  # the counter moves as the reply leaves the replica
            who = served_by(before, counters(replicas))
            if who:
                break
            time.sleep(0.05)
        out.append((req, outcome, who))
    return out


def all_at_once(url: str, reqs: list[Req]) -> list[Outcome]:
    return harness.together(lambda r: send(url, r), reqs)


def fingerprint(url: str) -> str | None:
    import httpx

    try:
        return (httpx.get(url + "/server_info", timeout=30).json().get("corun_contract") or {}).get("system_fingerprint")
    except (httpx.HTTPError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    from corun_sglang.tools import synthetic
    from corun_sglang.probes.launch import Server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/replicas", help="results folder (JSON and logs)")
    parser.add_argument("--shape", default="qwen3-small", help="synthetic checkpoint shape")
    parser.add_argument("--checkpoint", help="model folder (default: a synthetic one under --out)")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=64, help="--max-running-requests of every server")
    parser.add_argument("--kv-tokens", type=int, default=131072, help="--max-total-tokens of every server")
    parser.add_argument("--static-gb", type=float, default=24, help="static GPU memory of each server")
    parser.add_argument("--calibrate", default="auto", help="--corun-calibrate of every server")
    parser.add_argument("--server-args", default="", help="more options for every server")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--router-module", default=ROUTER_MODULE, help="the router's launcher module")
    parser.add_argument("--attempts", type=int, default=5, help="client attempts per request when a replica is lost")
    parser.add_argument("--kill-after-events", type=int, default=4,
                        help="stream events received (all requests together) before replica-1 is killed")
    parser.add_argument("--readmit-wait", type=float, default=45,
                        help="seconds between replica-1's restart and the pass after it (the router's health "
                             "check and circuit breaker take it back)")
    args = parser.parse_args(argv)

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ckpt = str(synthetic.prepare(Path(args.checkpoint or out / "checkpoint"), args.shape, "in-place"))
    env = {"CORUN_SGLANG_CACHE": str(out / "cache")}
    options = ["--corun", "--served-model-name", MODEL, "--enable-metrics", "--corun-calibrate", args.calibrate,
               "--max-running-requests", str(args.n), "--max-total-tokens", str(args.kv_tokens),
               *shlex.split(args.server_args)]
    kill_policy, router_options = compose_router()
    reqs = build_requests(args.requests, args.seed, args.max_new_tokens)
    rows: list[dict] = []
    fingerprints: dict[str, str | None] = {}
    notes: dict = {"router_options": router_options, "kill_policy": kill_policy}
    failures: list[str] = []  # what kept a step from running at all

    def start(name: str, port: int | None = None) -> Server:
        return Server(ckpt, options, out / f"{name}.log", timeout=1800, skip_tokenizer_init=False,
                      static_gb=args.static_gb, env=env, port=port)

    def write() -> dict:
        summary = summarize(rows, fingerprints)
        summary["failures"] = failures
        restarted = summary["phases"].get(f"restarted/{kill_policy}") or {}
        summary["restarted_replica_served"] = restarted.get("served_by", {}).get("replica-1", 0) > 0
        summary["ok"] = summary["ok"] and not failures and summary["restarted_replica_served"]
        (out / "replicas.json").write_text(json.dumps(
            {"config": vars(args), "options": options, "notes": notes, "summary": summary, "rows": rows},
            indent=1, default=str))
        return summary

    # 1. the reference
    single = start("single")
    try:
        fingerprints["single"] = fingerprint(single.url)
        reference_outcomes = all_at_once(single.url, reqs)
    finally:
        single.stop()
    reference = {r.key: o.generation if o.finished else None for r, o in zip(reqs, reference_outcomes)}
    rows += [row(r, o, o.generation, phase="single", policy=None) for r, o in zip(reqs, reference_outcomes)]

    replicas: list[Server] = []
    try:
        # 2. the replicas
        for i in range(2):
            replicas.append(start(f"replica-{i}"))
            fingerprints[f"replica-{i}"] = fingerprint(replicas[i].url)
        urls = {f"replica-{i}": s.url for i, s in enumerate(replicas)}

        # 3. each policy: one by one (attributed), then all at once
        for policy in [p for p in args.policies.split(",") if p]:
            try:
                router = Router(list(urls.values()), policy, router_options, out / f"router-{policy}.log",
                                module=args.router_module)
            except (RuntimeError, TimeoutError) as e:
                failures.append(f"router with policy {policy} did not start: {e}")
                continue
            try:
                for req, outcome, who in one_by_one(router.url, reqs, urls):
                    rows.append(row(req, outcome, reference[req.key], phase="one-by-one", policy=policy, served=who))
                before = counters(urls)
                outcomes = all_at_once(router.url, reqs)
                after = counters(urls)
                notes[f"all-at-once/{policy}"] = {k: after[k] - before.get(k, 0) for k in after}
                rows += [row(r, o, reference[r.key], phase="all-at-once", policy=policy)
                         for r, o in zip(reqs, outcomes)]
            finally:
                router.stop()
            write()

        # 4. replica-1 lost mid-run
        router = Router(list(urls.values()), kill_policy, router_options, out / "router-kill.log",
                        module=args.router_module)
        try:
            events = collections.Counter()
            started = threading.Event()

            def seen():
                events["n"] += 1
                if events["n"] >= args.kill_after_events:
                    started.set()

            with ThreadPoolExecutor(len(reqs)) as pool:
                futures = [pool.submit(send_until_done, router.url, r, args.attempts, seen) for r in reqs]
                started.wait(timeout=600)
                running = counters({"replica-1": urls["replica-1"]}, RUNNING_GAUGE)["replica-1"]
                os.killpg(replicas[1].proc.pid, signal.SIGKILL)
                notes["killed"] = {"replica": "replica-1", "stream_events_before": events["n"],
                                   "running_on_it": running}
                results = [f.result() for f in futures]
            replicas[1].stop()
            for req, (outcome, attempts, partials) in zip(reqs, results):
                rows.append(row(req, outcome, reference[req.key], phase="replica-lost", policy=kill_policy,
                                attempts=attempts, partials=partials))
            write()

            # 5. replica-1 back on its port
            try:
                replicas[1] = start("replica-1", port=replicas[1].port)
            except (RuntimeError, TimeoutError) as e:
                failures.append(f"replica-1 did not restart: {e}")
            else:
                fingerprints["replica-1 restarted"] = fingerprint(replicas[1].url)
                time.sleep(args.readmit_wait)
                notes["router_workers_after_restart"] = router.workers()
                for req, outcome, who in one_by_one(router.url, reqs, urls):
                    rows.append(row(req, outcome, reference[req.key], phase="restarted", policy=kill_policy,
                                    served=who))
        finally:
            router.stop()
    finally:
        for server in replicas:
            server.stop()

    summary = write()
    print(json.dumps({k: v for k, v in summary.items() if k != "phases"}, indent=1, default=str))
    for name, phase in summary["phases"].items():
        print(f"{name}: {phase['equal']}/{phase['requests']} equal, {phase['completed']} completed, "
              f"served by {phase['served_by']}, client retries {phase['client_retries']}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
