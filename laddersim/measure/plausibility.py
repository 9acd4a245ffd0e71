"""Physical plausibility of measured points before a fit uses them.

A calibration CSV or an imported log can hold numbers no hardware produces: a time of zero, or
an AllReduce of at most 1 GiB taking a second or more on GPUs (NVLink moves 1 GiB in a few ms, a
100 Gb/s network in ~0.2 s; a second means a broken measurement or a wrong unit). They are one
error line naming the file, the point and the allowed range, never a profile. CPU (gloo) runs are
exempt from the time bound: ranks time-sharing a few cores are slow by design. A GEMM row's
TFLOP/s must be its own 2mnk / time (the fit takes the best one as a CPU's peak). An AllReduce whose bus
bandwidth exceeds MAX_LINK_MULTIPLE x the fastest link of the base profile is refused for every
source (nccl-tests logs and calibrate runs share the rule below).
"""

from __future__ import annotations

from pathlib import Path

from laddersim.errors import UserInputError

GIB = 1024**3
MAX_SMALL_MESSAGE_US = 1e6  # 1 s: the bound for messages of at most 1 GiB on GPUs
MAX_LINK_MULTIPLE = 1.5  # bus bandwidth above this multiple of the fastest link is not a measurement
RATE_TOLERANCE = 0.02  # a GEMM row's tflops is 2mnk / time_us as written; rounding stays far inside 2%


def link_bandwidth_gbps(profile, nodes: int | None = None) -> float:
    """The fastest link a rank of ``profile`` has (GB/s): the intra-node bus bandwidth for a
    single-node group (``nodes == 1``), else the faster of it and the NIC bandwidth."""
    intra = profile.collectives.intra_node.bus_bandwidth_gb_per_s.value
    if nodes == 1:
        return intra
    return max(intra, profile.network.nic_bandwidth_gb_per_s.value if profile.network else 0.0)


def busbw_excess(busbw_gbps: float, link_gbps: float) -> str | None:
    """Why ``busbw_gbps`` cannot be measured over a fastest link of ``link_gbps`` GB/s, or None."""
    if not busbw_gbps > MAX_LINK_MULTIPLE * link_gbps:  # NaN: check_points refuses it
        return None
    return (f"busbw {busbw_gbps:g} GB/s exceeds {MAX_LINK_MULTIPLE}x the fastest link ({link_gbps:g} GB/s); "
            f"allowed: busbw <= {MAX_LINK_MULTIPLE * link_gbps:g} GB/s")


def check_allreduce_bandwidth(rows: list[dict], path: str | Path, profile) -> None:
    """Refuse the first AllReduce row whose bus bandwidth, 2(n-1)/n x size / time for a group of
    n ranks, exceeds MAX_LINK_MULTIPLE x ``profile``'s fastest link for the row's node count."""
    for number, row in enumerate(rows, start=2):  # line 1 is the header
        n, size, time_us = row.get("group_size"), row.get("size_bytes"), row.get("time_us")
        if not (n and n >= 2 and size and time_us and time_us > 0):
            continue
        busbw_gbps = 2 * (n - 1) / n * size / time_us / 1e3  # bytes/us -> GB/s
        why = busbw_excess(busbw_gbps, link_bandwidth_gbps(profile, row.get("nodes")))
        if why:
            raise UserInputError(f"measurement: {path}:{number}: {size} bytes in {time_us:g} us over {n} ranks: "
                                 f"{why} (base profile {profile.name})")


def check_points(rows: list[dict], path: str | Path, backend: str | None) -> None:
    """Refuse the first implausible row of ``rows`` (typed rows of one measurement CSV)."""
    for number, row in enumerate(rows, start=2):  # line 1 is the header
        for column, value in row.items():
            if column.endswith("_us") and value is not None and not value > 0:
                raise UserInputError(f"measurement: {path}:{number}: {column} = {value}; allowed: a time > 0 us")
        why = _rate_mismatch(row)
        if why:
            raise UserInputError(f"measurement: {path}:{number}: {why}")
        size, time_us = row.get("size_bytes"), row.get("time_us")
        if (backend == "nccl" and size is not None and time_us is not None and size <= GIB
                and time_us >= MAX_SMALL_MESSAGE_US):
            raise UserInputError(f"measurement: {path}:{number}: {time_us:g} us for {size} bytes; allowed: under "
                                 f"{MAX_SMALL_MESSAGE_US:g} us (1 s) for messages of at most 1 GiB on GPUs")


def _rate_mismatch(row: dict) -> str | None:
    """Why a GEMM row's ``tflops`` is not its own 2mnk / ``time_us`` (the fit takes the best rate
    as the peak of a device without a datasheet entry), or None."""
    m, n, k, time_us, tflops = (row.get(c) for c in ("m", "n", "k", "time_us", "tflops"))
    if None in (m, n, k, time_us, tflops) or not time_us > 0:
        return None
    rate = 2.0 * m * n * k / (time_us * 1e-6) / 1e12
    if abs(tflops - rate) <= RATE_TOLERANCE * rate:
        return None
    return (f"tflops = {tflops:g} for m={m} n={n} k={k} in {time_us:g} us; allowed: 2mnk / time = {rate:.4g} "
            f"(within {RATE_TOLERANCE:.0%})")
