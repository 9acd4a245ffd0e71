"""Reads that the L2 cache serves: a grouped-query attention that reads each KV head once per
query head of its group (``kv_reads: repeat_interleave`` with the expansion fused into the
attention's loads, as Inductor lowers gpt-fast's decode).

The query heads of one group read the same K (and V) rows one after the other: Inductor's
decode kernels walk their outputs head by head, so the next head of a group re-reads the rows
its predecessor has just streamed, one KV head's ``cache_len x head_dim`` elements earlier. While
that reuse window fits the L2 cache (``GpuSpec.l2_cache_mb``, a datasheet number), HBM streams
each KV head's rows once and every query head's read is served by L2: the kernel takes the slower
of the unique bytes at the HBM streaming rate and all the bytes the query heads read at the rate
the SMs read L2-resident data (``GpuSpec.l2_bandwidth_gb_per_s``). Beyond it, or on a GPU whose
profile gives no L2 figures, every query head's read comes from HBM.
"""

from __future__ import annotations

import numpy as np


def group_reads_s(gpu, unique_bytes, repeated_bytes, reuse_window_bytes):
    """Seconds to stream ``repeated_bytes`` (every query head's read) of which ``unique_bytes`` are
    distinct (each KV head once), re-read within ``reuse_window_bytes`` (scalars or arrays)."""
    hbm = gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value
    repeated = np.asarray(repeated_bytes, dtype=float)
    if gpu.l2_cache_mb is None or gpu.l2_bandwidth_gb_per_s is None:
        return repeated / hbm
    served = np.maximum(np.asarray(unique_bytes, dtype=float) / hbm,
                        repeated / (gpu.l2_bandwidth_gb_per_s.value * 1e9))
    fits = np.asarray(reuse_window_bytes, dtype=float) <= gpu.l2_cache_mb.value * 1e6
    return np.where(fits, served, repeated / hbm)
