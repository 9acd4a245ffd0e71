"""``sweep``: a grid of what-if scenarios into one resumable results table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.choices import DEFAULT_SCHEDULES
from laddersim.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model_shape import ModelShape


def sweep(grid: str | Path | dict, out: str | Path, workers: int = 1, scheduler: str | None = None,
          progress: bool = False) -> pd.DataFrame:
    """``laddersim sweep``: ``grid`` is a GRID.yaml path or the same mapping as a dict (keys
    ``models``, ``hardware``, ``tp``, ``batch``, ``prompt_len``, ``gen_len``, ``schedules``,
    ``overrides`` such as ``{"intra_bandwidth_gbps": [100, 400], "gpus_per_node": [4, 8]}``);
    results go to ``out`` (resumable: a re-run reuses stored points) and are returned, one row per
    point. ``scheduler``: a Dask scheduler address instead of ``workers`` local processes."""
    from laddersim.sweep.grid import load_grid, parse_grid
    from laddersim.sweep.sweep_dir import run_sweep

    parsed = parse_grid(grid, where="sweep grid") if isinstance(grid, dict) else load_grid(grid)
    return run_sweep(parsed, out, workers=workers, scheduler=scheduler, progress=progress).frame

