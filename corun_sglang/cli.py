"""The ``corun-sglang`` command."""

from __future__ import annotations

import argparse
import sys


def _apply_patches(args: argparse.Namespace) -> int:
    from pathlib import Path

    from corun_sglang import patches

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
    from corun_sglang import verify

    extra = {"ignore_eos": True} if args.ignore_eos else None
    send = verify.openai_sender(
        args.base_url, args.model, args.max_tokens, args.temperature,
        api_key=args.api_key, extra_body=extra,
    )
    texts = verify.prompts(args.prompts, seed=args.seed)
    try:
        reports = verify.run(send, texts, batch=args.batch, seed=args.seed)
    except Exception as exc:  # the server, not the check, failed
        print(f"corun-sglang verify: could not complete the check: {exc}", file=sys.stderr)
        return 2
    print(verify.render(reports))
    return 0 if all(r.ok for r in reports) else 1


def _doctor(args: argparse.Namespace) -> int:
    from corun_sglang import doctor

    found = doctor.checks(args.model_path)
    print(doctor.render(found, args.allow_no_gpu))
    return 0 if doctor.ready(found, args.allow_no_gpu) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="corun-sglang", description="Deterministic inference for SGLang (--corun)."
    )
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
        "(exit 1 on any divergence)",
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

    d = sub.add_parser(
        "doctor",
        help="check SGLang, FlashInfer, patches, hooks, GPU and the --corun configuration "
        "(exit 1 unless ready)",
    )
    d.add_argument("--model-path", help="also resolve the full --corun configuration for this model")
    d.add_argument("--allow-no-gpu", action="store_true",
                   help="ready even without a GPU (image builds, CI)")
    d.set_defaults(func=_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
