"""nccl-tests ``all_reduce_perf`` logs to a calibration run directory (and a profile).

Parsed from the stdout nccl-tests prints (NVIDIA/nccl-tests ``src/common.cu``):

* ``# Collective test starting: all_reduce_perf`` (nccl-tests >= 2.13) names the test; any other
  test is refused;
* ``# nThread 1 nGpus 8 minBytes ... iters: 20 ... graph: 0`` starts a run (iterations per
  point, and whether the collectives were captured in a CUDA graph: ``-G 1``);
* ``#  Rank  0 Group  0 Pid 123 on host-a device  0 [0x..] NVIDIA H100 80GB HBM3`` lines give
  the ranks, their hosts (distinct hosts = nodes) and the device (older versions omit ``Group``);
* data lines ``size count type redop root time algbw busbw #wrong time algbw busbw #wrong``
  (out-of-place, then in-place; older versions have no ``root`` column);
* ``nccl-library=22902`` (or ``NCCL version 2.29.2``) gives the library version.

The out-of-place time (a mean over ``iters`` calls, in us) becomes the point's ``time_us`` with
``stat = mean``. The run directory then fits like any other (``calibrate fit``); its tables are
labelled ``timing: loop`` (nccl-tests times a back-to-back loop, so each host launch overlaps the
previous collective and is not in the time).

Refused, one line each: a log of another test (header name, a redop that is not a reduction, a
root, or per-rank counts, as all_gather/reduce_scatter/alltoall/broadcast/reduce print), a log of
a single rank (an AllReduce of one rank moves nothing), and a group shape whose largest message
is below ``MIN_BANDWIDTH_BYTES`` (all latency floor: no bus bandwidth can be read from it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from laddersim.measure.environment import command_line, write_manifest
from laddersim.fitting.run_context import DTYPE_BYTES
from laddersim.fitting.profile_from_run import fit_run
from laddersim.measure.plausibility import busbw_excess, link_bandwidth_gbps
from laddersim.measure.schema import SCHEMAS, point_key
from laddersim.measure.store import PointStore, measurement_path
from laddersim.errors import UserInputError
from laddersim.support.io_read import read_text

NCCL_DTYPES = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16",
               "int8": "int8", "uint8": "uint8", "int32": "int32", "uint32": "uint32",
               "int64": "int64", "uint64": "uint64", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_RANK = re.compile(r"^#\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[[^\]]*\]\s+(.*?)\s*$")
_HEADER = re.compile(r"^#\s*nThread\s+\d+\s+nGpus\s+\d+")
_TEST_NAME = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
ALLREDUCE_TEST = "all_reduce_perf"  # also all_reduce_perf_mpi (built with NAME_SUFFIX=_mpi)
# test_opnames of nccl-tests src/common.cu; tests without a reduction print "none".
REDOPS = ("sum", "prod", "max", "min", "avg", "mulsum")
# The largest message a group shape must reach before its rows can pin a bus bandwidth. Below it
# the time is the latency floor: 8x H100 NVSwitch (aws_p5_h100_1node_nvswitch.log) takes 12.9 us
# at 8 B and still only 21.2 us at 512 KiB; 1 MiB (28.6 us) is the first size where the transfer
# term is over half the time. On 2 nodes over EFA (aws_p5_h100_2node_efa3200.log) the time is flat
# (~123 us) up to 1 MiB. A fit to smaller rows reads the floor as bandwidth (8-32 B rows give
# ~0.005 GB/s, and a simulated decode of 0.1 tok/s).
MIN_BANDWIDTH_BYTES = 1 << 20


@dataclass
class LogRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    time_us_inplace: float | None


@dataclass
class AllReduceLog:
    path: str
    iters: int | None = None
    graph: bool = False
    version: str = ""
    ranks: dict = field(default_factory=dict)  # rank -> (host, device name)
    rows: list[LogRow] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def hosts(self) -> list[str]:
        return sorted({host for host, _ in self.ranks.values()})

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def ranks_per_node(self) -> int:
        per = {}
        for host, _ in self.ranks.values():
            per[host] = per.get(host, 0) + 1
        return max(per.values())

    @property
    def device_name(self) -> str:
        return sorted({name for _, name in self.ranks.values()})[0]


def _number(text: str, path: str, lineno: int, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserInputError(f"log: {path}:{lineno}: {what} '{text}' is not a number") from None


def _not_allreduce(path: str, lineno: int, why: str) -> UserInputError:
    return UserInputError(f"log: {path}:{lineno}: {why}; this is not all_reduce_perf output "
                          f"(allowed: logs of nccl-tests {ALLREDUCE_TEST})")


def _data_row(tokens: list[str], path: str, lineno: int) -> LogRow:
    root = "-1"
    if len(tokens) == 13:  # with the root column (nccl-tests >= 2.10)
        size, count, dtype, redop, root, t, algbw, busbw, _w, t_ip = tokens[:10]
    elif len(tokens) == 12:
        size, count, dtype, redop, t, algbw, busbw, _w, t_ip = tokens[:9]
    else:
        raise UserInputError(f"log: {path}:{lineno}: all_reduce_perf data line has {len(tokens)} fields, "
                             "expected 12 or 13")
    if not size.isdigit() or not count.isdigit():
        raise UserInputError(f"log: {path}:{lineno}: size/count '{size} {count}' are not integers")
    if redop not in REDOPS:
        raise _not_allreduce(path, lineno, f"redop '{redop}' is not a reduction (allowed redops: "
                                           f"{', '.join(REDOPS)})")
    if root != "-1":
        raise _not_allreduce(path, lineno, f"root '{root}' is set (an AllReduce has none: root -1)")
    element = DTYPE_BYTES.get(NCCL_DTYPES.get(dtype, dtype))
    if element and int(size) != int(count) * element:
        raise _not_allreduce(path, lineno, f"size {size} B is not count {count} x {element} B "
                                           f"({dtype}), a per-rank count")
    time_us = _number(t, path, lineno, "time")
    if not time_us > 0:  # also NaN
        raise UserInputError(f"log: {path}:{lineno}: non-positive time {t}")
    return LogRow(int(size), int(count), NCCL_DTYPES.get(dtype, dtype), redop, time_us,
                  _number(algbw, path, lineno, "algbw"), _number(busbw, path, lineno, "busbw"),
                  _number(t_ip, path, lineno, "in-place time"))


def parse_log(path: str | Path) -> AllReduceLog:
    """One all_reduce_perf log (its first test run; later ones must repeat the same ranks)."""
    text = read_text(path, "log")  # the reading layer: missing, binary, non-UTF-8 or huge is one line
    log = AllReduceLog(str(path))
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if (match := _TEST_NAME.match(stripped)) is not None:
                test = match.group(1).rsplit("/", 1)[-1]
                if not test.startswith(ALLREDUCE_TEST):
                    raise _not_allreduce(str(path), lineno, f"test '{test}' in its header")
            elif _HEADER.match(stripped):
                iters = re.search(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)", stripped)
                graph = re.search(r"\bgraph:\s*(\d+)", stripped)
                log.iters = int(iters.group(1)) if iters else log.iters
                log.graph = bool(graph and int(graph.group(1)))
            elif (match := _RANK.match(stripped)) is not None:
                log.ranks[int(match.group(1))] = (match.group(2), match.group(4))
            elif (match := re.search(r"nccl-library=(\d+)", stripped)) is not None:
                code = int(match.group(1))  # NCCL_VERSION_CODE = major*10000 + minor*100 + patch
                log.version = f"{code // 10000}.{code // 100 % 100}.{code % 100}"
            continue
        if (match := re.search(r"NCCL version (\S+)", stripped)) is not None:
            log.version = log.version or match.group(1).split("+")[0]
            continue
        tokens = stripped.split()
        if not tokens[0].isdigit():
            continue  # NCCL INFO / launcher chatter between the tables
        log.rows.append(_data_row(tokens, str(path), lineno))
    if not log.rows:
        raise UserInputError(f"log: {path}: no all_reduce_perf data lines found")
    if not log.ranks:
        raise UserInputError(f"log: {path}: no '#  Rank N ... on HOST device D' lines; cannot tell "
                             "ranks and nodes (keep the header nccl-tests prints)")
    if log.world_size < 2:
        raise UserInputError(f"log: {path}: ranks: {log.world_size} ('#  Rank' lines); an AllReduce of one "
                             "rank moves no data (allowed: logs of 2 or more ranks)")
    return log


def _check_bandwidth_pinned(logs: list[AllReduceLog]) -> None:
    """Every group shape (ranks x nodes) must reach ``MIN_BANDWIDTH_BYTES`` in some log."""
    largest: dict[tuple[int, int], tuple[int, str]] = {}
    for log in logs:
        size = max(row.size_bytes for row in log.rows)
        shape = (log.world_size, log.nodes)
        if size > largest.get(shape, (-1, ""))[0]:
            largest[shape] = (size, log.path)
    for (ranks, nodes), (size, path) in sorted(largest.items()):
        if size < MIN_BANDWIDTH_BYTES:
            raise UserInputError(
                f"log: {path}: size: largest message {size} B ({ranks} ranks x {nodes} node(s)) is below "
                f"MIN_BANDWIDTH_BYTES = {MIN_BANDWIDTH_BYTES} B (1 MiB), too small to pin a bus bandwidth "
                f"(allowed: logs reaching >= {MIN_BANDWIDTH_BYTES} B, e.g. all_reduce_perf -b 8 -e 1G)")


# Physically impossible rows: bus bandwidth above MAX_LINK_MULTIPLE (plausibility.py) x
# the fastest link's datasheet, or a time of MAX_TIME_US or more for a message of MAX_TIME_CHECK_BYTES or less.
MAX_TIME_US = 1e6
MAX_TIME_CHECK_BYTES = 1 << 30


def implausible_row(log: AllReduceLog, link_gbps: float) -> str | None:
    """Why one row of ``log`` cannot be a real AllReduce (one line), or None. ``link_gbps``: the
    fastest link a rank has (the base profile's intra-node busbw or NIC bandwidth, GB/s)."""
    for row in log.rows:
        where = f"log: {log.path}: size {row.size_bytes}"
        values = (row.time_us, row.algbw_gbps, row.busbw_gbps)
        if not all(math.isfinite(v) for v in values) or row.time_us <= 0:
            return f"{where}: time/algbw/busbw {row.time_us}/{row.algbw_gbps}/{row.busbw_gbps} must be finite and time > 0"
        if row.size_bytes <= MAX_TIME_CHECK_BYTES and row.time_us >= MAX_TIME_US:
            return (f"{where}: time {row.time_us:.6g} us is >= 1 s for a message <= 1 GiB; allowed: times "
                    "an AllReduce can take (check the unit and the run)")
        if (why := busbw_excess(row.busbw_gbps, link_gbps)):
            return f"{where}: {why}"
    return None


def check_plausible(logs: list[AllReduceLog], base: str) -> None:
    """Refuse (one error line) the first physically impossible row among ``logs``."""
    from laddersim.hardware.profile import load_profile

    link_gbps = link_bandwidth_gbps(load_profile(base))
    for log in logs:
        why = implausible_row(log, link_gbps)
        if why:
            raise UserInputError(why)


def import_logs(paths: list[str], out: str, name: str | None, base: str, iters: int | None = None):
    """Parse ``paths`` into ``out`` (run.json + measurements/allreduce.csv), then fit a profile."""
    logs = [parse_log(p) for p in paths]
    _check_bandwidth_pinned(logs)
    check_plausible(logs, base)
    out_dir = Path(out)
    try:
        (out_dir / "measurements").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"out: cannot write to {out}: {exc.strerror}") from None
    schema = SCHEMAS["allreduce"]
    store = PointStore(measurement_path(out_dir, "allreduce"), schema)
    if store.path.exists():
        store.path.unlink()  # an import is rebuilt from its logs, not resumed
    seen: set[tuple] = set()
    for log in logs:
        for row in log.rows:
            point = {"world_size": log.world_size, "group_size": log.world_size, "nodes": log.nodes,
                     "dtype": row.dtype, "mode": "graph" if log.graph else "eager",
                     "size_bytes": row.size_bytes}
            key = point_key(schema, point)
            if key in seen:
                raise UserInputError(f"log: {log.path}: size {row.size_bytes} for {log.world_size} ranks x "
                                     f"{log.nodes} nodes {row.dtype} appears twice among the logs")
            seen.add(key)
            store.append({**point, "reps": log.iters or iters or 0, "stat": "mean",
                          "time_us": row.time_us, "p10_us": None, "p90_us": None, "min_us": None,
                          "max_us": None})
    first = max(logs, key=lambda log: log.world_size)
    versions = sorted({log.version for log in logs if log.version})
    manifest = {
        "source": "nccl-tests", "backend": "nccl", "device": "cuda", "device_name": first.device_name,
        "world_size": first.world_size, "ranks_per_node": max(log.ranks_per_node for log in logs),
        "nodes": max(log.nodes for log in logs),
        "hosts": sorted({h for log in logs for h in log.hosts}),
        "nccl": versions[0] if len(versions) == 1 else ", ".join(versions),
        "modes": sorted({"graph" if log.graph else "eager" for log in logs}),
        "logs": [f"{log.path} ({log.world_size} ranks x {log.nodes} nodes, {len(log.rows)} sizes)" for log in logs],
        "command_line": command_line(),
    }
    write_manifest(out_dir, manifest)
    return fit_run(out, name or out_dir.resolve().name, base)
