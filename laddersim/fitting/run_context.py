"""What every part of ``calibrate fit`` reads: the run directory (its manifest and measured rows,
checked), the base profile, and how a fitted or copied value cites them."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from laddersim.errors import UserInputError
from laddersim.measure.atomic import replace_file
from laddersim.measure.environment import library_name, read_manifest
from laddersim.measure.load import under_load_hint
from laddersim.measure.schema import SCHEMAS
from laddersim.measure.plausibility import check_allreduce_bandwidth, check_points
from laddersim.measure.store import PointStore, measurement_path
from laddersim.hardware.profile import load_profile
from laddersim.hardware.sourced import Sourced


DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "double": 8, "float": 4,
               "half": 2, "int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
               "fp8_e4m3": 1, "fp8_e5m2": 1}
DTYPE_PREFERENCE = ("bfloat16", "float16", "float32", "float64")


def collectives_on_host_cores(manifest: dict) -> bool:
    """Did the run's collectives progress on the cores that compute? On CPU ranks (gloo) their
    worker threads share the rank's cores; NCCL runs (calibrate's or imported nccl-tests logs)
    reduce on the GPUs."""
    return manifest.get("device") != "cuda"


@contextmanager
def refusal_under_load(manifest: dict):
    """A measurement refused as impossible (``laddersim.measure.plausibility``) in a run marked as
    measured under load: the one error line also says so (on CPU ranks a step's AllReduce is a
    difference of two timings, which other processes can drive to the floor)."""
    try:
        yield
    except UserInputError as exc:
        hint = under_load_hint(manifest)
        if not hint:
            raise
        raise UserInputError(f"{exc}; {hint}") from None


class FitContext:
    """Shared context: the run, its manifest and rows, the base profile, how to cite them."""

    def __init__(self, run_dir: str, name: str, base: str):
        self.run_dir = run_dir
        self.name = name
        self.manifest = read_manifest(run_dir)
        self.base_name = base
        self.base = load_profile(base)
        self.command = f"laddersim calibrate fit {run_dir} --name {name} --base {base}"
        with refusal_under_load(self.manifest):  # an impossible point of a loaded run says so
            self.frames = {b: read_frame(run_dir, b) for b in SCHEMAS}
            check_allreduce_bandwidth(self.frames["allreduce"].to_dict("records"),
                                      measurement_path(run_dir, "allreduce"), self.base)
        # Ladder-chain rows whose AllReduce was pooled into the table, and whose rates were solved
        # against it (laddersim.fitting.step_allreduce): said in the citations.
        self.pooled_chains = 0
        self.resolved_chains = 0
        self.is_cuda = self.manifest.get("device") == "cuda"
        self.library = library_name(self.manifest)

    def cite(self, benchmark: str, detail: str) -> str:
        return (f"fit: calibration run {self.run_dir} measurements/{benchmark}.csv, {detail}; "
                f"`{self.command}`")

    def copied(self, value: Sourced, what: str = "") -> Sourced:
        """``value`` of the base profile; ``what`` is " (why)" or empty (see ``copied_reason``)."""
        return Sourced(value=value.value, source=f"{COPIED_PREFIX}{self.base_name}{what}: {value.source}")


COPIED_PREFIX = "copied from base profile "


def copied_reason(value: Sourced, base: str) -> str | None:
    """Why a fit copied ``value`` from base profile ``base`` (the "(why)" of its source, else
    "not measured"), or None when the value was measured or fitted."""
    prefix = f"{COPIED_PREFIX}{base}"
    if not value.source.startswith(prefix + " (") and not value.source.startswith(prefix + ":"):
        return None
    rest = value.source[len(prefix):]
    return rest[2:].split("):", 1)[0] if rest.startswith(" (") else "not measured"


# Warnings from reading the run (a cut-short last line): printed once the fit has succeeded, so a
# fit that then fails prints its one error line alone.
READ_WARNINGS: list[str] = []


def read_frame(run_dir: str, benchmark: str) -> pd.DataFrame:
    store = PointStore(measurement_path(run_dir, benchmark), SCHEMAS[benchmark],
                       warn=lambda message: READ_WARNINGS.append(
                           message.replace("and its point will be measured again", "and not fitted")))
    rows = store.load(repair=False)
    check_points(rows, measurement_path(run_dir, benchmark), read_manifest(run_dir).get("backend"))
    return pd.DataFrame(rows, columns=list(SCHEMAS[benchmark].columns))


def pick_dtype(dtypes, preferred: str | None = None) -> str:
    present = list(dict.fromkeys(dtypes))
    for dtype in ((preferred,) if preferred else ()) + DTYPE_PREFERENCE:
        if dtype in present:
            return dtype
    return sorted(present)[0]


def compute_dtype(fit: FitContext) -> str | None:
    gemm = fit.frames["gemm"]
    return pick_dtype(gemm["dtype"]) if not gemm.empty else None


def atomic_write(path: Path, text: str) -> None:
    """``text`` as ``path``, whole or not at all (no ``.tmp`` left, also on a full disk)."""
    replace_file(path, text)
