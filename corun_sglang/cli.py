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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
