"""Warnings about measured curves that fall with size (noise, not hardware), printed after a fit
with a hint how to re-measure."""

from __future__ import annotations

from laddersim.measure.environment import read_manifest
from laddersim.fitting.collectives import extrapolation_warning
from laddersim.fitting.run_context import read_frame
from laddersim.measure.grid import human_bytes


# A time this much below the slowest smaller size of the same curve is noise, not the hardware.
NOISY_DROP_FRACTION = 0.2
# Curves with a size axis: benchmark -> the key columns of one curve (time should grow with size).
SIZE_CURVES = {"allreduce": ("group_size", "nodes", "dtype", "mode"), "memory": ("kernel", "dtype", "mode")}


def size_decreases(sizes_bytes, times_us, drop: float = NOISY_DROP_FRACTION) -> list[tuple[int, float, int, float]]:
    """(size, time, peak size, peak time): for each running peak of the curve (a time above every
    smaller size's), its deepest later point more than ``drop`` (a fraction) below it, in size
    order. One slow outlier is one entry, not one per point after it."""
    out, peak, deepest = [], None, None
    for size, time_us in sorted(zip(sizes_bytes, times_us)):
        if peak is None or time_us > peak[1]:
            out += [deepest] if deepest else []
            peak, deepest = (int(size), float(time_us)), None
        elif time_us < (1 - drop) * peak[1] and (deepest is None or time_us < deepest[1]):
            deepest = (int(size), float(time_us), *peak)
    return out + ([deepest] if deepest else [])


def _rerun_hint(manifest: dict) -> str:
    if manifest.get("source") == "nccl-tests":
        return "re-run all_reduce_perf with more iterations (-n) and import again"
    quick = (manifest.get("options") or {}).get("quick")
    return ("re-run into a new --out " + ("without --quick or " if quick else "") + "with more --repeats "
            "(the same --out only measures missing points)")


def noisy_table_warnings(run_dir: str) -> list[str]:
    """One line per measured curve (AllReduce per group/dtype/mode, memory kernel per dtype/mode)
    whose time falls with size by more than NOISY_DROP_FRACTION: the measurements are kept as they
    are, but such a table is noise more than hardware."""
    manifest, lines = read_manifest(run_dir), []
    for benchmark, keys in SIZE_CURVES.items():
        frame = read_frame(run_dir, benchmark)
        for key, curve in frame.groupby(list(keys), sort=True):
            drops = size_decreases(curve["size_bytes"], curve["time_us"])
            if not drops:
                continue
            size, time_us, smaller, smaller_us = max(drops, key=lambda d: 1 - d[1] / d[3])
            what = ", ".join(f"{c}={v}" for c, v in zip(keys, key))
            more = f" (and {len(drops) - 1} more such drop(s))" if len(drops) > 1 else ""
            lines.append(f"warning: measurements/{benchmark}.csv ({what}): {human_bytes(size)} took "
                         f"{time_us:.4g} us, {1 - time_us / smaller_us:.0%} less than {human_bytes(smaller)} "
                         f"({smaller_us:.4g} us){more}; times should grow with size, this table is noisy: "
                         f"{_rerun_hint(manifest)}")
    allreduce = read_frame(run_dir, "allreduce")
    multi = allreduce[allreduce["nodes"] > 1] if not allreduce.empty else allreduce
    warning = extrapolation_warning(multi["size_bytes"]) if not multi.empty else None
    return lines + ([warning] if warning else [])
