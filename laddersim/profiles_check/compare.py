"""Modelled vs measured: AllReduce and GEMM errors of one profile, table by table.

The model side is the parametric model (fits and alpha-beta tiers, ``allreduce_time_s(..., measured=False)``) and,
where the profile ships a model table for the group, the interpolation of that compact table.
The measured side is the ORIGINAL source rows in 4 KiB-256 MiB where ``LADDERSIM_SHARED`` names
them (``laddersim.profiles_check.sources``), else the shipped compact rows (which are medians of
original rows at power-of-two sizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.costs.allreduce import allreduce_time_s
from laddersim.costs.collectives import interpolate_table_s, mode_correction_s
from laddersim.costs.gemm import gemm_time_s
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.sourced import MeasuredTable
from laddersim.hardware.table_files import read_gemm_table_csv
from laddersim.profiles_check.sources import (
    ALLREDUCE_SOURCES, CHECK_MAX_BYTES, CHECK_MIN_BYTES, GEMM_SOURCES, read_allreduce_source, read_gemm_source,
    reference_data_root,
)

MEDIAN_LIMIT = 0.10  # a profile's collectives pass at median |rel err| <= 10% and worst <= 30%
WORST_LIMIT = 0.30
LLAMA_MIN_DIM = 512  # smallest n or k of a Llama 8B/70B/405B projection at TP <= 8 (8B o_proj, TP 8)


@dataclass(frozen=True)
class GroupCheck:
    """One (table, gpus, nodes) comparison."""

    table: MeasuredTable
    gpus: int
    nodes: int
    rows: pd.DataFrame  # size_bytes, measured_us, model_us, table_us (NaN where no model table)
    origin: str  # "original rows" | "shipped rows"
    skipped: str = ""  # why no model exists for this group (e.g. no network)
    outside_window: bool = False  # every row lies outside 4 KiB-256 MiB (anchor points)

    def _err(self, column: str) -> np.ndarray:
        return np.abs(self.rows[column] / self.rows["measured_us"] - 1.0).to_numpy()

    @property
    def model_median(self) -> float:
        return float(np.median(self._err("model_us"))) if len(self.rows) else float("nan")

    @property
    def model_worst(self) -> float:
        return float(np.max(self._err("model_us"))) if len(self.rows) else float("nan")

    @property
    def table_median(self) -> float:
        e = self._err("table_us")
        return float(np.nanmedian(e)) if np.isfinite(e).any() else float("nan")

    @property
    def table_worst(self) -> float:
        e = self._err("table_us")
        return float(np.nanmax(e)) if np.isfinite(e).any() else float("nan")

    @property
    def scatter(self) -> float:
        """The measured rows' own scatter: worst |row / median of rows within 10% in size - 1|
        (NaN for sparse sweeps where no row has two neighbours that close)."""
        size = self.rows["size_bytes"].to_numpy()
        t = self.rows["measured_us"].to_numpy()
        worst = float("nan")
        for i in range(len(t)):
            near = np.abs(np.log(size / size[i])) <= np.log(1.1)
            if near.sum() >= 3:
                dev = abs(t[i] / np.median(t[near]) - 1.0)
                worst = dev if not worst >= dev else worst
        return worst

    @property
    def passes(self) -> bool:
        return bool(len(self.rows)) and self.model_median <= MEDIAN_LIMIT and self.model_worst <= WORST_LIMIT


def _measured_rows(table: MeasuredTable, shipped: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    key = Path(table.file).stem
    if key in ALLREDUCE_SOURCES and reference_data_root() is not None:
        return read_allreduce_source(key), "original rows"
    return shipped[["gpus", "nodes", "size_bytes", "time_us"]], "shipped rows"


def check_allreduce(profile: HardwareProfile, force_shipped: bool = False) -> list[GroupCheck]:
    """Every (table, group) of the profile's AllReduce tables, compared in 4 KiB-256 MiB."""
    model_tables = {}
    for table, frame in profile.allreduce_tables:
        if table.use == "model":
            for key, rows in frame.groupby(["gpus", "nodes"]):
                model_tables.setdefault(key, (table, rows))
    out = []
    for table, shipped in profile.allreduce_tables:
        measured, origin = ((shipped, "shipped rows") if force_shipped else _measured_rows(table, shipped))
        # The model is in the simulated regime; a table's rows in the regime they were timed in (a
        # single CUDA-event-timed eager call pays the host launch that a graph replay or a
        # back-to-back loop hides). Convert the model as the simulator converts a table, backwards.
        launch_us = -mode_correction_s(profile, table) * 1e6
        for (gpus, nodes), rows in measured.groupby(["gpus", "nodes"], sort=True):
            inside = rows[(rows["size_bytes"] >= CHECK_MIN_BYTES) & (rows["size_bytes"] <= CHECK_MAX_BYTES)]
            # Anchor-point tables with no row in the window are still compared (and reported as
            # outside the window, not gated).
            outside = inside.empty and not rows.empty
            rows = rows if outside else inside
            if nodes > 1 and profile.network is None:
                out.append(GroupCheck(table, gpus, nodes, rows.iloc[:0].assign(measured_us=[], model_us=[],
                           table_us=[]), origin, skipped="profile has no inter-node network"))
                continue
            size = rows["size_bytes"].to_numpy()
            model = allreduce_time_s(profile, int(gpus), size, nodes=int(nodes), measured=False) * 1e6 + launch_us
            compact_table, compact = model_tables.get((gpus, nodes), (None, None))
            # The compact table in this table's timing regime (nothing to add when it is this table).
            shift_us = (mode_correction_s(profile, compact_table) - mode_correction_s(profile, table)) * 1e6 \
                if compact_table is not None else 0.0
            table_us = (interpolate_table_s(compact["size_bytes"].to_numpy(), compact["time_s"].to_numpy(), size)
                        * 1e6 + shift_us if compact is not None else np.full(len(size), np.nan))
            frame = pd.DataFrame({"size_bytes": size, "measured_us": rows["time_us"].to_numpy(),
                                  "model_us": model, "table_us": table_us})
            out.append(GroupCheck(table, int(gpus), int(nodes), frame, origin, outside_window=outside))
    return out


@dataclass(frozen=True)
class GemmCheck:
    table: MeasuredTable
    rows: pd.DataFrame  # m, n, k, measured_us, model_us
    origin: str

    def errors(self, subset: str) -> np.ndarray:
        rows = self.rows
        if subset == "llama":
            rows = rows[(rows["n"] >= LLAMA_MIN_DIM) & (rows["k"] >= LLAMA_MIN_DIM)]
        return np.abs(rows["model_us"] / rows["measured_us"] - 1.0).to_numpy()

    def median(self, subset: str) -> float:
        return float(np.median(self.errors(subset)))

    def p90(self, subset: str) -> float:
        return float(np.quantile(self.errors(subset), 0.9))

    @property
    def passes(self) -> bool:
        return self.median("llama") <= MEDIAN_LIMIT


def check_gemm(profile: HardwareProfile, force_shipped: bool = False) -> list[GemmCheck]:
    out = []
    for table in profile.gpu.gemm_tables:
        key = Path(table.file).stem
        if key in GEMM_SOURCES and reference_data_root() is not None and not force_shipped:
            rows, origin = read_gemm_source(key), "original rows"
        else:
            rows, origin = read_gemm_table_csv(Path(profile.base_dir) / table.file), "shipped rows"
        model = gemm_time_s(profile.gpu, rows["m"].to_numpy(), rows["n"].to_numpy(), rows["k"].to_numpy(), 2) * 1e6
        frame = rows[["m", "n", "k"]].assign(measured_us=rows["time_us"].to_numpy(), model_us=model)
        out.append(GemmCheck(table, frame.reset_index(drop=True), origin))
    return out


def summary_frame(checks: list[GroupCheck]) -> pd.DataFrame:
    """One line per (table, group): errors, scatter, verdict."""
    lines = []
    for c in checks:
        lines.append({
            "table": Path(c.table.file).stem, "use": c.table.use, "library": c.table.library,
            "mode": f"{c.table.mode}/{c.table.timing}", "gpus": c.gpus, "nodes": c.nodes, "rows": len(c.rows),
            "model_median": c.model_median, "model_worst": c.model_worst,
            "table_median": c.table_median, "table_worst": c.table_worst, "scatter": c.scatter,
            "verdict": ("skipped" if c.skipped or not len(c.rows) else "outside window" if c.outside_window
                        else "pass" if c.passes else "miss"),
            "reason": c.skipped or ("all rows outside 4 KiB-256 MiB: shown, not gated" if c.outside_window else
                                    "" if c.passes else c.table.expect_miss),
            "origin": c.origin,
        })
    return pd.DataFrame(lines)
