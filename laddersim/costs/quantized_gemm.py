"""Seconds of one linear layer under a quantization (laddersim.model.quantization), and the
kernels that quantize its input.

* FP8 (``fp8``, ``fp8-block``): from the profile's measured table of that GEMM kind
  (``gpu.quantized_gemm_tables``: AIConfigurator's vLLM 0.24.0 FP8 rows, whose times include the
  activation quantization the vLLM layer runs before the GEMM), interpolated as the 16-bit tables
  are (laddersim.costs.gemm_tables); outside the table's grid the FP8 roofline anchored to its
  nearest point. A profile without the table prices the GEMM by the roofline (the GPU's fitted
  GEMM efficiencies at its FP8 peak, one byte per operand element) plus the quantize kernels, each
  a memory-bound kernel reading the 16-bit input (the max reduction) or reading it and writing
  its FP8 copy (the conversion).
* Block-scaled FP8 (``fp8-block``) from its own table (its rows from m = 1024, beyond them the
  roofline anchored to the nearest) where its time is at least ``BLOCK_TABLE_MIN_S``: the rows were
  timed without a CUDA graph, so a shorter GEMM's time is the host's launch cost (60-100 us at every
  shape below m = 1024, and at small n, k above it). Elsewhere it is priced as the
  per-tensor FP8 GEMM: both stream the same one-byte weights, and where the block table is
  reliable the two are close (AIConfigurator vLLM 0.24.0, rows of at least 0.3 ms: median block /
  per-tensor time 0.905 on H100 (3640 rows), 0.992 on H200 (3543), 1.027 on B200 (2306)).
* NVFP4 (``nvfp4``) from the profile's ``nvfp4`` table (AIConfigurator's vLLM 0.24.0 NVFP4 rows:
  the compressed-tensors W4A4 layer, its activation quantization included, under a CUDA graph),
  outside its grid the FP4 roofline anchored to its nearest point. Without the table: the FP4
  roofline (the GPU's GEMM efficiencies at its FP4 peak, every operand at the NVFP4 bytes,
  0.5 + 1/16 per element, as the FP8 roofline takes one byte) plus its one quantize kernel
  (reading the 16-bit input, writing the FP4 copy and its scales).
* Weight-only (``int8-weight``, ``int4-weight``): the 16-bit GEMM's time (its table or roofline)
  with the part above the kernel floor scaled by the bytes moved at the quantized weights' size
  over the bytes at 16 bit, never below the 16-bit compute roofline: the dequantization runs inside
  the GEMM, which streams fewer weight bytes and computes at 16 bit (Marlin's W4A16 reaches close
  to the 4x of the bytes up to batch 16-32 and the 16-bit rate beyond: IST-DASLab/marlin README).
"""

from __future__ import annotations

import numpy as np

from laddersim.costs.gemm import gemm_time_s, memory_bound_time_s
from laddersim.costs.gemm_tables import SOL, library_gemm_time_s, table_path, table_time_s
from laddersim.hardware.compute_specs import QuantizedGemmTable
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.quantization import Quantization
from laddersim.model.workload import Workload

FP8_BYTES = 1
BLOCK_TABLE_MIN_S = 300e-6  # see the module docstring
BLOCK_TABLE_MIN_M = 1024  # the block tables' least m (laddersim.profiles_check.sources: QuantizedGemmSource.min_m)


def quantized_gemm_table(hw: HardwareProfile, gemm_dtype: str) -> QuantizedGemmTable | None:
    """The profile's measured table of ``gemm_dtype`` GEMMs (``fp8``, ``fp8_block``, ``nvfp4``), if any."""
    return next((t for t in hw.gpu.quantized_gemm_tables if t.gemm_dtype == gemm_dtype and t.use == "model"), None)


def quantize_time_s(hw: HardwareProfile, work: Workload, m: int, k: int) -> float:
    """Seconds of the kernels quantizing one linear's ``m x k`` 16-bit input: the first reads it
    (a dynamic scale's max reduction; a per-token-group or NVFP4 kernel also writes), the last
    reads it and writes the quantized copy (``activation_bytes`` per element: FP8 one byte, NVFP4
    half a byte and its block scales)."""
    quant = work.quantization
    kernels = quant.quantize_kernels
    if kernels == 0:
        return 0.0
    read, write = m * k * work.dtype_bytes, m * k * quant.activation_bytes
    moved = read + (kernels - 1) * read + write
    return float(memory_bound_time_s(hw.gpu, moved, kernels=kernels))


def quantized_linear_time_s(hw: HardwareProfile, work: Workload, m: int, n: int, k: int,
                            peak_16bit_flops_per_s: float, input_quantized: bool = False) -> tuple[float, str]:
    """Seconds of one quantized linear (its input's quantization included) and the source label.
    ``input_quantized``: the kernel producing the input writes it quantized already (a framework's
    ``quantize_fused``), so a GEMM priced by its roofline runs no quantize kernels of its own (a
    measured table's time is the call's as measured)."""
    quant = work.quantization
    if quant.gemm == "weight_only":
        return _weight_only_time_s(hw, work, m, n, k, peak_16bit_flops_per_s)
    if quant.gemm == "fp8_block":
        block = _table_time_s(hw, "fp8_block", quant, m, n, k)
        if block is not None and m >= BLOCK_TABLE_MIN_M and block[0] >= BLOCK_TABLE_MIN_S:
            return block
    # Elsewhere a block-scaled FP8 GEMM is priced as the per-tensor one (the module docstring).
    measured = _table_time_s(hw, "nvfp4" if quant.gemm == "fp4" else "fp8", quant, m, n, k)
    if measured is not None:
        return measured
    return _roofline_s(hw, quant, m, n, k) + (0.0 if input_quantized else quantize_time_s(hw, work, m, k)), SOL


def _operand_bytes(quant: Quantization) -> float:
    """Bytes per element of a low-precision GEMM's operands: FP8 one byte, NVFP4 its nibble and
    block scale (``weight_bytes``)."""
    return FP8_BYTES if quant.tensor_cores == "fp8" else quant.weight_bytes


def _roofline_s(hw: HardwareProfile, quant: Quantization, m: int, n: int, k: int) -> float:
    """The GEMM's roofline at its operands' bytes and its tensor cores' peak."""
    return float(gemm_time_s(hw.gpu, m, n, k, _operand_bytes(quant), None,
                             hw.gpu.peak_flops_per_s_for(quant.tensor_cores)))


def _table_time_s(hw: HardwareProfile, gemm_dtype: str, quant: Quantization, m: int, n: int,
                  k: int) -> tuple[float, str] | None:
    """The GEMM's time and label from the profile's ``gemm_dtype`` table (outside its grid the
    quantization's roofline, anchored); None without one."""
    table = quantized_gemm_table(hw, gemm_dtype)
    if table is None or not hw.base_dir:
        return None
    peak = hw.gpu.peak_flops_per_s_for(quant.tensor_cores)
    return table_time_s(hw.gpu, table_path(hw.base_dir, table.file), m, n, k, _operand_bytes(quant), peak)


def _weight_only_time_s(hw: HardwareProfile, work: Workload, m: int, n: int, k: int,
                        peak: float) -> tuple[float, str]:
    b = work.dtype_bytes
    full_s, label = library_gemm_time_s(hw, m, n, k, b, peak)
    ratio = (m * k * b + n * k * work.weight_bytes + m * n * b) / (b * (m * k + n * k + m * n))
    gpu = hw.gpu
    tile = gpu.gemm_tile_m.value
    compute_s = 2.0 * np.ceil(m / tile) * tile * n * k / (peak * gpu.gemm_compute_efficiency.value)
    body = max((full_s - gpu.kernel_launch_s) * ratio, float(compute_s))
    return gpu.kernel_launch_s + body, label


# The linear op kinds a quantization covers (laddersim.costs.pass_shapes.linear_shapes; the LM
# head stays 16-bit).
QUANTIZED_KINDS = frozenset({"qkv", "o_proj", "gate_up", "qkv_gate_up", "down"})


def is_quantized_linear(work: Workload, kind: str) -> bool:
    """Is op ``kind`` a linear run by the quantization's GEMM?"""
    return work.quant != "none" and kind in QUANTIZED_KINDS


def quantized_class_split_s(hw: HardwareProfile, work: Workload, seconds: float, shape) -> dict[str, float]:
    """A quantized linear's ``seconds`` by kernel class (laddersim.costs.kernel_counts): its input's
    quantize kernels (``generated``, priced as ``quantize_time_s``) apart from its GEMM
    (``library_gemm``, the rest). Where a measured time (a table's, the quantization included)
    is shorter than those kernels and the GEMM's roofline together, it is shared in their
    proportion, so neither part shows as nothing. ``shape``: the linear's (m, n, k, parts)."""
    if not work.quantization.quantize_kernels:
        return {"library_gemm": seconds}
    m, n, k = shape[0], shape[1], shape[2]
    quantize_s = quantize_time_s(hw, work, m, k)
    gemm_s = _roofline_s(hw, work.quantization, m, n, k)  # as quantized_linear_time_s prices it
    if quantize_s + gemm_s > seconds:
        quantize_s = seconds * quantize_s / (quantize_s + gemm_s)
    return {"generated": quantize_s, "library_gemm": seconds - quantize_s}
