"""Print the fitted per-phase floor of each framework's custom all-reduce kernels and the
algorithm-only price's errors on every system's table (laddersim.fitting.custom_allreduce; the
H100 table fits, the others are held out). Usage: ``PYTHONPATH=$PWD python tools/fits/fit_custom_allreduce.py``."""

from __future__ import annotations

import sys

from laddersim.fitting.custom_allreduce import FIT_ON, errors_by_system, fit_floor_us


def main() -> int:
    for framework in ("vllm", "trtllm", "sglang"):
        floor_us = fit_floor_us(framework)
        parts = [f"{framework}-custom: floor_us {floor_us} (fit to {FIT_ON})"]
        for system, (median, worst) in errors_by_system(framework, floor_us).items():
            tag = "fit" if system == FIT_ON else "held out"
            parts.append(f"{system} ({tag}) median |error| {median:.1%}, worst {worst:.1%}")
        print("; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
