"""Fit the fused-MoE grouped GEMM's share of the dense GEMM compute efficiency
(``laddersim.costs.moe_costs.COMPUTE_SHARE``) to the measured vLLM fused-MoE table of an H100: prints
the median |error| of every grid point and the pick; writes nothing.

    PYTHONPATH=$PWD python tools/fits/fit_moe_compute_share.py
"""

from __future__ import annotations

import numpy as np

from laddersim.hardware.profile import load_profile
from laddersim.validation.moe_kernels import KERNEL_TABLE, kernel_table_rows


def main() -> int:
    hw = load_profile("h100-sxm-nvswitch")
    grid = []
    for share in np.round(np.arange(0.50, 1.0001, 0.05), 2):
        rows = kernel_table_rows(hw, KERNEL_TABLE, compute_share=float(share))
        big = rows[rows.num_tokens >= 4096]
        grid.append((float(np.median(np.abs(rows.error))), float(share)))
        print(f"{share:.2f}: median |error| {100 * grid[-1][0]:.2f}% over {len(rows)} rows; "
              f"4096-8192 tokens median error {100 * float(np.median(big.error)):+.1f}%")
    print(f"pick: {min(grid)[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
