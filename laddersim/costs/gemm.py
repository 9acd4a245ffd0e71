"""GEMM and memory-bound kernel times on one GPU.

A GEMM Y[m, n] = X[m, k] @ W[n, k]^T (a linear layer: m tokens, k in-features, n out-features)
costs 2mnk FLOPs and moves (mk + nk + mn) elements. Its time is a roofline whose two terms are
blended by a p-norm (so the knee between memory- and compute-bound is smooth, as measured),
plus the kernel floor inside a CUDA graph:

    t = launch + (t_compute^p + t_memory^p)^(1/p)
    t_compute = 2 * ceil(m / tile_m) * tile_m * n * k / (peak_flops * compute_eff)
    t_memory  = bytes / (peak_bw * memory_eff)

M is padded to the tile height for the compute term: decode-shaped small-M GEMMs pay for a full
tile of tensor-core work but are memory-bound long before that matters.
"""

from __future__ import annotations

import numpy as np

from laddersim.hardware.compute_specs import GpuSpec


def gemm_time_s(gpu: GpuSpec, m, n, k, dtype_bytes: int = 2, launch_s: float | None = None,
                peak_flops_per_s: float | None = None):
    """Seconds for one GEMM (scalars or numpy arrays broadcast together); ``launch_s`` replaces
    the GPU's kernel floor (a framework that runs this GEMM with another kernel);
    ``peak_flops_per_s`` the fp16/bf16 peak (another dtype's, ``GpuSpec.peak_flops_per_s_for``)."""
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    tile = gpu.gemm_tile_m.value
    m_padded = np.ceil(m / tile) * tile
    peak = gpu.peak_flops_per_s if peak_flops_per_s is None else peak_flops_per_s
    t_compute = 2.0 * m_padded * n * k / (peak * gpu.gemm_compute_efficiency.value)
    moved_bytes = dtype_bytes * (m * k + n * k + m * n)
    t_memory = moved_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value)
    p = gpu.gemm_blend_order.value
    launch = gpu.kernel_launch_s if launch_s is None else launch_s
    return launch + (t_compute**p + t_memory**p) ** (1.0 / p)


def memory_bound_time_s(gpu: GpuSpec, moved_bytes, kernels: int = 1, launch_s: float | None = None):
    """Seconds for ``kernels`` memory-bound kernels moving ``moved_bytes`` in total (``launch_s``
    replaces the GPU's kernel floor)."""
    bandwidth = gpu.memory_bandwidth_bytes_per_s * gpu.elementwise_memory_efficiency.value
    launch = gpu.kernel_launch_s if launch_s is None else launch_s
    return kernels * launch + np.asarray(moved_bytes, dtype=float) / bandwidth
