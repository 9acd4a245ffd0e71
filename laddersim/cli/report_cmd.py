"""``laddersim report``: write reports/index.md and its figures from built-in defaults."""

from __future__ import annotations

import argparse

from laddersim.api.reporting import SECTIONS, report
from laddersim.cli.args import call_api, default_of, integer


def register(sub) -> None:
    p = sub.add_parser("report", help="write the report (reports/index.md with figures) from built-in defaults",
                       description=f"Write DIR/index.md and its figures in DIR/figures/ from built-in defaults, "
                                   f"{len(SECTIONS)} sections: {'; '.join(SECTIONS)}. About 30 s on 2 CPU cores.")
    p.add_argument("--out", default=default_of(report, "out"), metavar="DIR",
                   help=f"report directory (default {default_of(report, 'out')})")
    p.add_argument("--quick", action="store_true", help="fewer bandwidth what-if points")
    p.add_argument("--workers", type=integer, default=default_of(report, "workers"),
                   help=f"processes for the bandwidth sweep (default {default_of(report, 'workers')}: the machine "
                        "may be shared)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (section progress still printed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(call_api(report, args, progress=not args.no_progress))
    return 0
