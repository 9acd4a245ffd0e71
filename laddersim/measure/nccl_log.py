"""What NCCL itself decided on a machine, read from its debug log: the transport of every ring
hop and its own cost model (the tuning table), so that laddersim's transport mechanism
(``laddersim.costs.transport``) can be checked against the machine's NCCL rather than fitted.

Run any NCCL program (``laddersim calibrate run``, nccl-tests, a serving engine) with

    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING NCCL_DEBUG_FILE=nccl.%h.%p.log ...

and every communicator's initialisation prints, in this order (the table on rank 0 only):

* ``comm 0x.. rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0`` (NCCL >= 2.19);
* ``Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct`` per ring hop (``P2P/...``, ``SHM/...``,
  ``NET/...``; before 2.19 ``Channel 00 : 0[1c000] -> ...``);
* the tuning table (``src/graph/tuning.cc``, ``ncclTopoTuneModel``; its exact ``printf`` formats
  are that file's lines 543-583 on NVIDIA/nccl's master as read):
  blocks of three algorithms, a row per collective of ``latency/bandwidth`` per algorithm and
  protocol (``%8.1f/%6.1f``: us, and the algorithm bandwidth in GB/s; 0 bandwidth: disabled);
* ``32 coll channels, ...`` (the communicator's channels).

NCCL picks, for a message of ``n`` bytes, the (algorithm, protocol) of least
``latency + n / (1000 x bandwidth)`` us (``ncclTopoGetAlgoTime``: Tree AllReduce bandwidth scaled
by ``treeCorrectionFactor`` at medium sizes; an inter-node Ring Simple's latency x1.4 on
Ampere and later): ``nccl_choice`` reproduces it from the table.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from pathlib import Path

from laddersim.costs.nccl_tuning import PROTOCOLS as PROTOCOL_ORDER
from laddersim.costs.nccl_tuning import TREE_CORRECTION
from laddersim.errors import UserInputError
from laddersim.hardware.transport_spec import NcclTuningEntry

# ncclAlgoStr / ncclProtoStr (src/graph/tuning.cc) -> laddersim's names (laddersim.costs.nccl_tuning)
ALGORITHMS = {"Tree": "tree", "Ring": "ring", "CollNetDirect": "collnet_direct", "CollNetChain": "collnet_chain",
              "NVLS": "nvls", "NVLSTree": "nvls_tree", "PAT": "pat"}
PROTOCOLS = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}
TRANSPORTS = {"P2P": "p2p", "SHM": "shm", "NET": "net", "NVLS": "nvls", "CollNet": "collnet"}

_PREFIX = re.compile(r"^.*?NCCL INFO ?")
_ALGO_ROW = re.compile(r"^\s*Algorithm\s*\|(.*)$")
_PROTO_ROW = re.compile(r"^\s*Protocol\s*\|(.*)$")
_FUNC_ROW = re.compile(r"^\s*([A-Za-z]+)\s*\|((?:\s*-?[\d.]+/\s*-?[\d.]+\s*\|)+)\s*$")
_COMM = re.compile(r"\bnRanks (\d+) nNodes (\d+)")
_CHANNELS = re.compile(r"\b(\d+) coll channels")
_HOP = re.compile(r"Channel \d+(?:/\d+)? : \d+\[\w+\] -> \d+\[\w+\](?: \[\w+\])? via (\w+)/")


@dataclasses.dataclass
class TuningTable:
    """One communicator's tuning table: ``entries[(function, algorithm, protocol)] = (latency_us,
    bandwidth_gb_per_s)`` (laddersim's algorithm and protocol names, NCCL's function names)."""

    ranks: int | None = None
    nodes: int | None = None
    channels: int | None = None
    entries: dict = dataclasses.field(default_factory=dict)
    transports: dict = dataclasses.field(default_factory=dict)  # ring hops printed, per transport
    origin: str = ""  # the log file it was read from


def parse_log(text: str) -> list[TuningTable]:
    """Every tuning table of an NCCL debug log, in order, each with what its communicator's
    initialisation printed around it: ranks and nodes (the ``comm ... nRanks N nNodes M`` line
    that opens it), the ring hops' transports (printed before the table) and the channels (after
    it); None or empty where the log does not say."""
    comms: list[TuningTable] = []
    current: TuningTable | None = None
    algos: list[str] = []
    protos: list[str] = []
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw)
        if m := _COMM.search(line):  # a communicator's initialisation begins
            current = TuningTable(ranks=int(m.group(1)), nodes=int(m.group(2)))
            comms.append(current)
            continue
        if current is None and (_HOP.search(line) or _ALGO_ROW.match(line)):
            current = TuningTable()  # an NCCL too old to print the comm line
            comms.append(current)
        if m := _CHANNELS.search(line):
            if current is not None:
                current.channels = int(m.group(1))
        if m := _HOP.search(line):
            name = TRANSPORTS.get(m.group(1), m.group(1).lower())
            current.transports[name] = current.transports.get(name, 0) + 1
        if m := _ALGO_ROW.match(line):
            algos = [_one_word(field) for field in m.group(1).split("|")[:-1]]
            if algos and algos[0] == "Tree" and current.entries:  # a second table, same communicator
                current = dataclasses.replace(current, entries={}, transports=dict(current.transports))
                comms.append(current)
            continue
        if m := _PROTO_ROW.match(line):
            protos = [_one_word(field) for field in m.group(1).split("|")[:-1]]
            continue
        m = _FUNC_ROW.match(line)
        if m and current is not None and algos and protos:
            for i, field in enumerate(m.group(2).split("|")[:-1]):
                if i // len(PROTOCOLS) >= len(algos) or i >= len(protos):
                    break
                latency, bandwidth = (float(v) for v in field.split("/"))
                algo = ALGORITHMS.get(algos[i // len(PROTOCOLS)], algos[i // len(PROTOCOLS)].lower())
                proto = PROTOCOLS.get(protos[i], protos[i].lower())
                current.entries[(m.group(1), algo, proto)] = (latency, bandwidth)
    return [t for t in comms if t.entries]


def read_logs(paths) -> list[TuningTable]:
    """``parse_log`` of each file in turn (one per rank or per process: NCCL_DEBUG_FILE's %p)."""
    tables: list[TuningTable] = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise UserInputError(f"log: no such file {path}; allowed: NCCL debug logs (NCCL_DEBUG=INFO)")
        for table in parse_log(path.read_text(errors="replace")):
            table.origin = path.name
            tables.append(table)
    if not tables:
        raise UserInputError("log: no NCCL tuning table found; allowed: logs written with NCCL_DEBUG=INFO "
                             "NCCL_DEBUG_SUBSYS=INIT,TUNING (rank 0 of each communicator prints it)")
    return tables


def _one_word(field: str) -> str:
    words = field.split()
    return words[0] if words else ""


def nccl_time_us(table: TuningTable, algorithm: str, protocol: str, size_bytes: float,
                 function: str = "AllReduce") -> float | None:
    """NCCL's own estimate of one (algorithm, protocol) for one message (``ncclTopoGetAlgoTime``,
    one operation); None where the table disables it (bandwidth 0)."""
    latency, bandwidth = table.entries.get((function, algorithm, protocol), (0.0, 0.0))
    if bandwidth <= 0:
        return None
    log_size = int(math.log2(int(size_bytes) >> 6)) if int(size_bytes) >> 6 > 0 else -1
    if algorithm == "tree" and function == "AllReduce" and 0 <= log_size < len(TREE_CORRECTION[0]):
        bandwidth *= TREE_CORRECTION[PROTOCOL_ORDER.index(protocol)][log_size]
    channels = table.channels or 1
    ranks = table.ranks or 1
    if (algorithm == "ring" and protocol == "simple" and (table.nodes or 1) > 1 and function == "AllReduce"
            and size_bytes / (channels * ranks) >= 64):
        latency *= 1.4  # "plateau effect of ring" (compute capability >= 8.0)
    return latency + size_bytes / (1000.0 * bandwidth)


def nccl_choice(table: TuningTable, size_bytes: float, function: str = "AllReduce") -> tuple[str, str, float]:
    """(algorithm, protocol, estimated us) NCCL picks for one message: its least estimate."""
    best = None
    for (func, algorithm, protocol) in table.entries:
        if func != function:
            continue
        t = nccl_time_us(table, algorithm, protocol, size_bytes, function)
        if t is not None and (best is None or t < best[2]):
            best = (algorithm, protocol, t)
    if best is None:
        raise UserInputError(f"log: the tuning table enables no algorithm for {function}")
    return best


def _communicator(table: TuningTable) -> str:
    ranks = f"{table.ranks} ranks" if table.ranks else "ranks not printed"
    nodes = f", {table.nodes} node{'s' if table.nodes != 1 else ''}" if table.nodes else ""
    channels = f", {table.channels} channels" if table.channels else ""
    hops = ", ".join(f"{name} {count}" for name, count in sorted(table.transports.items()))
    return f"{ranks}{nodes}{channels}; ring hops: {hops or 'not printed'}"


def choice_rows(tables: list[TuningTable], max_size: int, profile=None):
    """A row per table and AllReduce message size (powers of two from 1 KiB to ``max_size``):
    NCCL's pick and estimate, and, with a ``profile`` and the table's rank count, laddersim's pick
    for that group (``laddersim.costs.collectives.collective_choice``) and whether they agree."""
    import pandas as pd

    from laddersim.costs.collectives import collective_choice

    rows = []
    for index, table in enumerate(tables):
        size = 1024
        while size <= max(max_size, 1024):
            algorithm, protocol, estimate = nccl_choice(table, size)
            row = {"table": index, "communicator": _communicator(table), "size_bytes": size,
                   "nccl": f"{algorithm}/{protocol}", "nccl_estimate_us": estimate}
            if profile is not None and table.ranks and table.ranks > 1:
                try:
                    ours = "/".join(collective_choice(profile, table.ranks, float(size)))
                except UserInputError:
                    ours = "-"
                row["laddersim"] = ours
                row["agrees"] = ours.split("/")[0] == algorithm and (
                    ours.split("/")[-1] in (protocol, "fit"))
            rows.append(row)
            size *= 2
    return pd.DataFrame(rows)


PROFILE_ALGORITHMS = typing.get_args(NcclTuningEntry.model_fields["algorithm"].annotation)  # what a profile states


def profile_entries(tables: list[TuningTable]) -> list[dict]:
    """The AllReduce entries of each table with a rank count, as a profile's
    ``collectives.transport.nccl_tuning`` list (the last table of each rank count wins)."""
    by_ranks: dict[int, TuningTable] = {}
    for table in tables:
        if table.ranks and table.ranks > 1:
            by_ranks[table.ranks] = table
    out = []
    for ranks, table in sorted(by_ranks.items()):
        for (func, algorithm, protocol), (latency, bandwidth) in table.entries.items():
            if func == "AllReduce" and algorithm in PROFILE_ALGORITHMS and bandwidth > 0:
                out.append({"gpus": ranks, "algorithm": algorithm, "protocol": protocol, "latency_us": latency,
                            "bandwidth_gb_per_s": bandwidth,
                            "source": f"NCCL's tuning table, {table.origin or 'log'} (laddersim calibrate nccl-log)"})
    return out
