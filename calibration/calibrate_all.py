"""All calibration microbenchmarks in one launch: AllReduce, GEMM, memory-bound, interference.

    python calibration/calibrate_all.py --backend gloo --world-size 2 --out runs/cpu --quick
    torchrun --nproc-per-node 8 calibration/calibrate_all.py --out runs/h100
    (laddersim calibrate run ... is the same program)

Each measured point is appended to RUN_DIR/measurements/<benchmark>.csv as soon as it exists;
re-running with the same --out measures only what is missing. See calibration/README.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # run as `python calibration/calibrate_all.py` from a checkout
    sys.path.insert(0, _ROOT)

from laddersim.measure.environment import command_line  # noqa: E402
from laddersim.measure.options import add_run_args, options_from_args  # noqa: E402
from laddersim.errors import UserInputError  # noqa: E402


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: Sequence[str] | None = None, benchmarks: tuple[str, ...] = ()) -> int:
    """``benchmarks`` fixes the subset (the single-benchmark scripts); else --benchmarks."""
    parser = _OneLineParser(prog=Path(sys.argv[0]).name, description=__doc__.splitlines()[0])
    add_run_args(parser)
    args = parser.parse_args(argv)
    if benchmarks:
        args.benchmarks = [",".join(benchmarks)]
    try:
        opts = options_from_args(args)
        from calibration.bench_launch import launch

        return launch(opts, command_line())
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished points are kept; re-run the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
