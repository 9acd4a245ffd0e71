"""``laddersim report``: write reports/index.md and its figures from built-in defaults."""

from __future__ import annotations

import argparse

from pathlib import Path

from laddersim.cli.args import positive_int
from laddersim.io_write import check_output


def register(sub) -> None:
    p = sub.add_parser("report", help="write the report (reports/index.md with figures) from built-in defaults",
                       description="Write DIR/index.md (paper reproduction, bandwidth what-if, decode-step "
                                   "timeline, planning example) and DIR/figures/ from built-in defaults.")
    p.add_argument("--out", default="reports", metavar="DIR", help="report directory (default reports)")
    p.add_argument("--quick", action="store_true", help="fewer bandwidth what-if points")
    p.add_argument("--workers", type=positive_int("workers"), default=1,
                   help="processes for the bandwidth sweep (default 1: the machine may be shared)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (section progress still printed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from laddersim.report import build_report

    check_output(args.out, "out", "dir")
    check_output(Path(args.out) / "index.md", "out", "file")
    index = build_report(args.out, quick=args.quick, workers=args.workers, progress=not args.no_progress)
    print(index)
    return 0
