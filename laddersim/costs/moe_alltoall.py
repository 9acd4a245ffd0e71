"""The all-to-all of expert parallelism with data-parallel attention: dispatch sends each token's
hidden state to the ranks holding its top-k experts, combine sends the expert outputs back.

Bytes: a rank's send buffer for one all-to-all is its tokens x top-k x ``dim`` x the activation
bytes (each token copied once per chosen expert, as DeepEP's normal dispatch and vLLM's
``allgather_reducescatter`` default move them at most; nccl-tests' ``alltoall_perf`` size is that
whole buffer, ``(n - 1) / n`` of it leaving the rank). Combine moves the same bytes back.

Time: the profile's measured all-to-all table (``<its model all-reduce table>_alltoall.csv``
beside it: ``tools/dev/alltoall_table.py`` from AIConfigurator's nccl-tests rows), interpolated
log-log at the group's GPU count, one node; else its links (both through the intra-node tier's
what-if factors, ``laddersim.costs.scaling``), NCCL's all-to-all as ``n - 1``
point-to-point exchanges over the intra-node tier: ``base + (n - 1) step`` latency plus
``(n - 1) / n`` of the buffer at the tier's bus bandwidth (one note on stderr that the links price it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from laddersim.costs.collectives import scaled_table_s
from laddersim.costs.gemm_tables import SILICON, SOL
from laddersim.costs.scaling.view import links
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.table_files import read_table_arrays

ALLTOALL_SUFFIX = "_alltoall"
_noted: set[str] = set()


def alltoall_table_path(hw: HardwareProfile) -> Path | None:
    """The profile's all-to-all table: beside its first model all-reduce table, the same name with
    ``_alltoall``; None where there is none."""
    for table in hw.collectives.tables:
        if table.use == "model":
            path = Path(hw.base_dir) / table.file
            sibling = path.with_name(path.stem + ALLTOALL_SUFFIX + path.suffix)
            if sibling.exists():
                return sibling
    return None


def dispatch_bytes(tokens: int, top_k: int, dim: int, dtype_bytes: float) -> float:
    """One rank's all-to-all send buffer for ``tokens`` tokens each sent to ``top_k`` experts."""
    return float(tokens * top_k * dim * dtype_bytes)


def alltoall_time_s(hw: HardwareProfile, gpus: int, size_bytes: float) -> tuple[float, str]:
    """Seconds of one all-to-all of ``size_bytes`` per rank over ``gpus`` GPUs of one node, and its
    source (``SILICON``: the measured table; ``SOL``: the links)."""
    if gpus <= 1:
        return 0.0, SOL
    intra = links(hw).intra  # the intra-node tier's what-if factors, as the AllReduce tables take them
    path = alltoall_table_path(hw)
    if path is not None:
        cols = read_table_arrays(path)
        rows = (cols["gpus"] == gpus) & (cols["nodes"] == 1)
        if rows.any():
            return float(scaled_table_s(cols["size_bytes"][rows], cols["time_s"][rows], size_bytes, intra)), SILICON
    if hw.name not in _noted:
        _noted.add(hw.name)
        print(f"note: {hw.name} has no measured all-to-all table for {gpus} GPUs; the EP dispatch and combine "
              "are priced from its intra-node links", file=sys.stderr)
    tier = hw.collectives.intra_node
    latency_s = intra.latency_s(tier.base_latency_us.value + (gpus - 1) * tier.step_latency_us.value)
    moved = size_bytes * (gpus - 1) / gpus
    return float(latency_s + np.float64(moved) / intra.bytes_per_s(tier.bus_bandwidth_gb_per_s.value)), SOL


def ep_layer_comm_s(hw: HardwareProfile, ep: int, tokens_per_gpu: int, top_k: int, dim: int,
                    dtype_bytes: float) -> tuple[float, str]:
    """Seconds of one MoE layer's dispatch and combine over ``ep`` GPUs of one node, each GPU sending
    ``tokens_per_gpu`` tokens to their ``top_k`` experts and receiving the outputs back (two
    all-to-alls of ``dispatch_bytes``), and their source."""
    seconds, source = alltoall_time_s(hw, ep, dispatch_bytes(tokens_per_gpu, top_k, dim, dtype_bytes))
    return 2.0 * seconds, source
