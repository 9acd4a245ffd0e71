"""What-if sweeps: a grid of scenarios, expanded to points, run on local cores or a Dask cluster,
stored point by point so an interrupted sweep resumes, consolidated into one tidy table."""

from laddersim.sweeps.grid import SweepGrid, load_grid
from laddersim.sweeps.points import INPUT_COLUMNS, Point, expand_grid
from laddersim.sweeps.sweep_dir import SweepReport, run_sweep

__all__ = ["INPUT_COLUMNS", "Point", "SweepGrid", "SweepReport", "expand_grid", "load_grid", "run_sweep"]
