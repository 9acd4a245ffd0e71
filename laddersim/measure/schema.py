"""Columns of each benchmark's measurement CSV (``RUN_DIR/measurements/<benchmark>.csv``).

A point is identified by its key columns (what was measured); the value columns say what was
found. Times are microseconds over ``reps`` timed repetitions after warm-up: ``time_us`` is the
central value (``stat`` = median for our runs, mean for imported nccl-tests logs), the spread
columns are percentiles of the same samples (empty when the source gives only a mean).
"""

from __future__ import annotations

from dataclasses import dataclass

TIMING_VALUES = ("reps", "stat", "time_us", "p10_us", "p90_us", "min_us", "max_us")


@dataclass(frozen=True)
class Schema:
    benchmark: str
    keys: tuple[str, ...]
    values: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return self.keys + self.values


SCHEMAS: dict[str, Schema] = {
    s.benchmark: s
    for s in (
        # AllReduce of size_bytes per rank over the first group_size ranks (spanning nodes).
        Schema("allreduce", ("world_size", "group_size", "nodes", "dtype", "mode", "size_bytes"),
               TIMING_VALUES),
        # AllGather of the vocab-parallel logits: size_bytes is the gathered output (every rank's
        # part) over the first group_size ranks; measured at the run's models and batches.
        Schema("allgather", ("world_size", "group_size", "nodes", "dtype", "mode", "size_bytes"),
               TIMING_VALUES),
        # Y[m, n] = X[m, k] @ W[n, k]^T on one device; origin names the model op it stands for.
        Schema("gemm", ("dtype", "mode", "m", "n", "k"), TIMING_VALUES + ("tflops", "origin")),
        # Memory-bound kernels on size_bytes tensors; moved_bytes counts reads plus writes.
        Schema("memory", ("dtype", "mode", "kernel", "size_bytes"),
               TIMING_VALUES + ("moved_bytes", "gbps")),
        # Compute (a batch of GEMMs m x n x k, or with ``model`` that model's own attention + MLP
        # modules at m tokens) beside AllReduces on another stream/thread; slowdowns are medians
        # of per-repetition ratios (alone and overlapped timed back to back), with their spread.
        Schema("interference", ("world_size", "group_size", "dtype", "mode", "size_bytes", "m", "n", "k",
                                "model"),
               ("reps", "gemm_alone_us", "gemm_overlap_us", "comm_alone_us", "comm_overlap_us",
                "compute_slowdown", "comm_slowdown", "compute_p10", "compute_p90", "comm_p10", "comm_p90")),
        # Framework (host dispatch) cost per op of a chain of small ops of one class, in one mode.
        # ``cpu_share`` (op_class cpu_share, CPU ranks): the fraction of wall time a rank kept busy
        # for a sustained window really ran (other processes on the cores take the rest).
        Schema("overhead", ("dtype", "mode", "op_class"), TIMING_VALUES + ("ops_per_chain", "cpu_share")),
        # Rank skew: every rank runs ``modules`` of the model's own decode modules in a row (``batch``
        # tokens) right after a barrier; per repetition, the slowest rank's time less the ranks' mean
        # is what a rank waits, on average, at the collective that follows. ``stretch_us``: the
        # mean time of the stretch; ``wait_us``: the mean wait; ``wait_fraction`` = their ratio.
        Schema("skew", ("world_size", "group_size", "dtype", "model", "batch", "modules"),
               ("reps", "stretch_us", "wait_us", "wait_fraction")),
        # Top-level framework ops per program op kind in a profiler trace of one ladder_bench
        # decode step: "kind.class=ops per occurrence;..." (calibration/op_trace.py).
        Schema("ops", ("model", "tp", "batch", "schedule"), ("ops_total", "counts")),
    )
}
BENCHMARKS = tuple(SCHEMAS)

INT_COLUMNS = frozenset({"world_size", "group_size", "nodes", "size_bytes", "m", "n", "k", "reps",
                         "moved_bytes", "ops_per_chain", "tp", "batch", "ops_total", "modules"})
STR_COLUMNS = frozenset({"dtype", "mode", "stat", "kernel", "origin", "op_class", "model", "schedule", "counts"})
# May be empty: an imported log gives a mean without spread.
OPTIONAL_COLUMNS = frozenset({"p10_us", "p90_us", "min_us", "max_us", "origin", "compute_p10", "compute_p90",
                              "comm_p10", "comm_p90", "cpu_share"})


def point_key(schema: Schema, row: dict) -> tuple:
    """The identity of a point: its key columns, typed (so 1024 and "1024" are one key)."""
    return tuple(parse_cell(c, row[c]) if isinstance(row[c], str) else row[c] for c in schema.keys)


def parse_cell(column: str, text: str):
    """A CSV cell to its typed value; raises ValueError naming what is wrong."""
    if text == "" and column in OPTIONAL_COLUMNS:
        return None
    if column in STR_COLUMNS:
        if not text:
            raise ValueError(f"{column} is empty")
        return text
    if column in INT_COLUMNS:
        value = int(text)
        if value < 0:
            raise ValueError(f"{column} is negative")
        return value
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{column} is not finite")
    if column.endswith("_us") and value <= 0:
        raise ValueError(f"{column} is not a positive time")
    return value


def format_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, ".6g")
    return str(value)
