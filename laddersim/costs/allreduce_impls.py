"""The AllReduce implementations serving engines run, as records, and the one rule that picks
among a framework's (``pick``).

A framework names, in order, the implementations its TP all-reduce tries (its data file's
``allreduce``; ``--allreduce`` replaces the list by one); NCCL closes every list. The rule takes
the first implementation that (a) can run on the group, machine and dtype (``why_not``: one
node, a supported group size, GPU peer-to-peer access, NVLink between every pair, NVSwitch
multicast, the dtype), and (b) takes the message size (``kernel_for``: its one-shot / two-shot
cut-offs; ``nvls``: where the profile's multimem table covers it, or any size when asked for by
name). Each record cites the source file and commit its conditions and cut-offs come from.

A picked custom kernel is priced from the profile's measured table of that framework's all-reduce
path (``table_library``: a ``collectives.tables`` entry whose ``library`` starts with it, e.g.
AIConfigurator's custom_allreduce tables of vLLM, TRT-LLM and SGLang) where the table has the
group size and covers the message; else from its algorithm over the profile's NVLink
(``algorithm_time_s``: a one-shot kernel reads ``(n - 1) S`` from its peers, a two-shot kernel
``2 (n - 1) / n S`` in two phases, each phase a fixed floor of launch and flag barrier), said once
on stderr. NCCL is priced by ``laddersim.costs.collectives``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from laddersim.costs.collectives import mode_correction_s, scaled_table_s
from laddersim.costs.scaling.view import links
from laddersim.errors import UserInputError
from laddersim.hardware.profile import HardwareProfile

KIB = 1024
MIB = 1024 * KIB
ONE_SHOT, TWO_SHOT, MULTIMEM, NCCL_KERNEL = "one-shot", "two-shot", "multimem", "nccl"
# Activations are reduced in 16-bit: an fp8 model's AllReduce runs on bf16 activations.
_REDUCED_DTYPE = {"fp8": "bfloat16"}


@dataclass(frozen=True, slots=True)
class Cutoff:
    """For groups of up to ``max_gpus`` GPUs: one-shot below ``one_shot_below_bytes``, two-shot
    below ``two_shot_below_bytes``, the next implementation (NCCL) from there on; ``inclusive``:
    "up to and including" rather than "below"."""

    max_gpus: int
    one_shot_below_bytes: float
    two_shot_below_bytes: float
    inclusive: bool = False


@dataclass(frozen=True, slots=True)
class AllReduceImpl:
    """One AllReduce implementation: ``name`` (``--allreduce``); ``table_library``: the prefix of
    the profile's table ``library`` that measures it (None: none); ``world_sizes``: the group sizes
    it runs (empty: any); ``needs_p2p``: GPU peer access (CUDA IPC); ``nvlink_all_pairs_above``:
    groups of more GPUs than this need NVLink between every pair (None: never); ``needs_multicast``:
    NVSwitch multicast (NVLS); ``dtypes``: the dtypes it reduces (empty: any); ``cutoffs``: its
    kernels by size and group (empty: every size, one kernel ``MULTIMEM`` or ``NCCL_KERNEL``);
    ``floor_us``: each kernel phase's launch and flag barrier where no table prices it;
    ``input_copies``: copies of the message into (and out of) its buffer per phase count
    (PyTorch's symmetric-memory buffer); ``source``: where these come from."""

    name: str
    table_library: str | None
    source: str
    world_sizes: tuple[int, ...] = ()
    needs_p2p: bool = False
    nvlink_all_pairs_above: int | None = None
    needs_multicast: bool = False
    dtypes: tuple[str, ...] = ()
    cutoffs: tuple[Cutoff, ...] = ()
    floor_us: float = 0.0
    input_copies: dict | None = None


# Floors fitted by tools/fits/fit_custom_allreduce.py to the H100 tables of each framework
# (tables/aic_h100_sxm_{vllm_0.24.0,trtllm_1.3.0rc20,sglang_0.5.14}_graph.csv, 16 KiB-4 MiB at
# TP 2/4/8 where the framework's rule runs a custom kernel): the median of (t - moved / busbw) /
# phases with the profile's NVLink busbw (370 GB/s); the other GPUs' tables are held out.
_VLLM_FLOOR_US = 5.0
_TRTLLM_FLOOR_US = 3.35
_SGLANG_FLOOR_US = 3.44

NCCL = AllReduceImpl("nccl", None, "NCCL's algorithms and protocols (laddersim.costs.collectives)")
NVLS = AllReduceImpl(
    "nvls", "multimem", needs_multicast=True, world_sizes=(3, 4, 5, 6, 7, 8),
    source="NVLink SHARP multicast all-reduce (NCCL NVLS, torch symmetric memory multimem_all_reduce_, "
           "pytorch/pytorch PR 133424): the switch reduces, so it needs NVSwitch multicast and more than 2 GPUs "
           "(NCCL src/transport/nvls.cc); priced from the profile's multimem table (TokenWeave's NVLS kernel), "
           "else by the profile's NCCL model of the group (its measured table or fitted lines, which NCCL's "
           "tuner runs on NVLS where it is fastest)")
PYTORCH_INTRA_NODE = AllReduceImpl(
    "pytorch-intra-node", None, world_sizes=(2, 3, 4, 5, 6, 7, 8), needs_p2p=True, nvlink_all_pairs_above=1,
    dtypes=("bfloat16", "float32"), cutoffs=(Cutoff(8, 256 * KIB, 10 * MIB, inclusive=True),),
    floor_us=_VLLM_FLOOR_US, input_copies={ONE_SHOT: 1, TWO_SHOT: 2},
    source="pytorch/pytorch @ 05382727fd08ac518afece33a69e4bb72c2d2cab : torch/csrc/distributed/c10d/symm_mem/"
           "intra_node_comm.cu (selectAllReduceAlgo: bf16/fp32 only, else NONE and NCCL runs; FULLY_CONNECTED "
           "topology, i.e. NVLink between every pair; one-shot <= kOneShotThreshBytes 256 KiB, two-shot <= "
           "kTwoShotThreshBytes 10 MiB; the input copied into the symmetric buffer, and back after two-shot); "
           "one host of 2-8 GPUs, switch ENABLE_INTRA_NODE_COMM=1 (pytorch PR 114001); no measured table: its "
           "one-shot/two-shot kernels priced with vLLM's floor (the same flag-barrier design)")
VLLM_CUSTOM = AllReduceImpl(
    "vllm-custom", "vLLM", world_sizes=(2, 4, 6, 8), needs_p2p=True, nvlink_all_pairs_above=2,
    cutoffs=(Cutoff(2, 8 * MIB, 8 * MIB), Cutoff(4, 512 * KIB, 8 * MIB), Cutoff(8, 256 * KIB, 8 * MIB)),
    floor_us=_VLLM_FLOOR_US,
    source="vllm-project/vllm @ 00d618aab60448acdf3fac3e9c4e2e22d0c6c753 : vllm/distributed/device_communicators/"
           "custom_all_reduce.py (world sizes 2/4/6/8, one node, P2P checked, more than 2 GPUs need full NVLink, "
           "inp_size < max_size 8 MiB) and @ 036bb685581dbedcd6cf7fc845fe87268c7d1191 : csrc/custom_all_reduce.cuh "
           "(REDUCE_CASE: one-shot always at world size 2, else below 512 KiB at <= 4 GPUs and 256 KiB at <= 8, "
           "two-shot above)")
SGLANG_CUSTOM = AllReduceImpl(
    "sglang-custom", "SGLang", world_sizes=(2, 4, 6, 8), needs_p2p=True, nvlink_all_pairs_above=2,
    cutoffs=VLLM_CUSTOM.cutoffs, floor_us=_SGLANG_FLOOR_US,
    source="sgl-project/sglang @ 004e6561cb8ae26d62166c15782955f99f058274 : python/sglang/srt/distributed/"
           "device_communicators/custom_all_reduce.py (_SUPPORTED_WORLD_SIZES 2/4/6/8, _MAX_CAR_SIZE 8 MiB, one "
           "node, P2P, more than two PCIe-only GPUs refused, inp_size < max_size) and @ "
           "0bb5d5e9fdb0c6ea031d3f8ac23444f8142d1f81 : sgl-kernel/csrc/allreduce/custom_all_reduce.cuh (vLLM's "
           "REDUCE_CASE cut-offs)")
TRTLLM_CUSTOM = AllReduceImpl(
    "trtllm-custom", "TRT-LLM", world_sizes=(2, 4, 8), needs_p2p=True, nvlink_all_pairs_above=0,
    cutoffs=(Cutoff(2, 16e6, 16e6), Cutoff(4, 1e6, 8e6), Cutoff(8, 500e3, 8e6)), floor_us=_TRTLLM_FLOOR_US,
    source="NVIDIA/TensorRT-LLM @ 005b299bd30992a58607c7628bb2009264970f37 : cpp/tensorrt_llm/plugins/ncclPlugin/"
           "allreducePlugin.cpp (selectImplementation under AUTO: NCCL without P2P or NVLink; within the workspace "
           "one-shot always at TP 2, below 1 MB at TP 4, below 500 KB above) and cpp/tensorrt_llm/common/"
           "customAllReduceUtils.h (workspace 16 MB at TP <= 2, else 8 MB; the PyTorch flow's SM90 table, no "
           "fusion, hidden 8192, TP 8: two-shot from 32 to 256 tokens, i.e. 512 KiB-4 MiB, NCCL from 8 MiB)")

IMPLEMENTATIONS = {impl.name: impl for impl in (NCCL, NVLS, PYTORCH_INTRA_NODE, VLLM_CUSTOM, TRTLLM_CUSTOM,
                                                SGLANG_CUSTOM)}
ALLREDUCE_NAMES = tuple(IMPLEMENTATIONS)


@dataclass(frozen=True, slots=True)
class Pick:
    """The implementation a rule picked for one message and the kernel it runs."""

    impl: AllReduceImpl
    kernel: str

    @property
    def label(self) -> str:
        return self.impl.name if self.kernel in (NCCL_KERNEL, MULTIMEM) else f"{self.impl.name} {self.kernel}"


NCCL_PICK = Pick(NCCL, NCCL_KERNEL)


def implementation(name: str) -> AllReduceImpl:
    """The record named ``name``, or one line naming the allowed names."""
    if name not in IMPLEMENTATIONS:
        raise UserInputError(f"allreduce: unknown '{name}'; allowed: {', '.join(ALLREDUCE_NAMES)}")
    return IMPLEMENTATIONS[name]


def reduced_dtype(dtype: str) -> str:
    """The dtype an AllReduce of a ``dtype`` model's activations runs in."""
    return _REDUCED_DTYPE.get(dtype, dtype)


def _topology(hw: HardwareProfile) -> tuple[bool, bool, bool]:
    """(GPU peer access, NVLink between every pair, NVSwitch multicast) of the profile's node."""
    spec = hw.collectives.transport
    p2p = spec is None or spec.topology.p2p == "enabled"
    all_pairs = hw.node.fabric == "nvswitch" or (spec is not None and spec.topology.gpu_links == "nvlink")
    multicast = hw.node.fabric == "nvswitch" and "nvls" in hw.collectives.algorithms
    return p2p, all_pairs, multicast


def why_not(impl: AllReduceImpl, hw: HardwareProfile, tp: int, dtype: str) -> str | None:
    """Why ``impl`` cannot run an AllReduce of ``tp`` GPUs on ``hw`` in ``dtype`` (None: it can)."""
    if impl is NCCL or tp <= 1:
        return None
    p2p, all_pairs, multicast = _topology(hw)
    if hw.nodes_for(tp) != 1:
        return f"{impl.name} runs inside one node; {tp} GPUs span {hw.nodes_for(tp)} nodes of {hw.name}"
    if impl.world_sizes and tp not in impl.world_sizes:
        return f"{impl.name} runs on {'/'.join(map(str, impl.world_sizes))} GPUs, not {tp}"
    if impl.needs_multicast and not multicast:
        return f"{impl.name} needs NVSwitch multicast (NVLS), which {hw.name} has not"
    if impl.needs_p2p and not p2p:
        return f"{impl.name} needs GPU peer-to-peer access, which is disabled on {hw.name}"
    if impl.nvlink_all_pairs_above is not None and tp > impl.nvlink_all_pairs_above and not all_pairs:
        return (f"{impl.name} on more than {impl.nvlink_all_pairs_above} GPUs needs NVLink between every pair; "
                f"{hw.name}'s GPUs are joined by {hw.node.fabric}")
    reduced = reduced_dtype(dtype)
    if impl.dtypes and reduced not in impl.dtypes:
        return f"{impl.name} reduces {'/'.join(impl.dtypes)} only, not {reduced}"
    return None


def require_runs(name: str, hw: HardwareProfile, tp: int, dtype: str) -> None:
    """One line (``UserInputError``) where the implementation ``name`` cannot run this group."""
    reason = why_not(implementation(name), hw, tp, dtype)
    if reason is not None:
        raise UserInputError(f"allreduce: {reason}")


def kernel_for(impl: AllReduceImpl, tp: int, size_bytes: float) -> str | None:
    """The kernel ``impl`` runs for a message of ``size_bytes`` over ``tp`` GPUs (None: the message
    is beyond its cut-offs and the next implementation takes it)."""
    if not impl.cutoffs:
        return MULTIMEM if impl.needs_multicast else NCCL_KERNEL
    cut = next((c for c in impl.cutoffs if tp <= c.max_gpus), impl.cutoffs[-1])
    below = (lambda limit: size_bytes <= limit) if cut.inclusive else (lambda limit: size_bytes < limit)
    if below(cut.one_shot_below_bytes):
        return ONE_SHOT
    if below(cut.two_shot_below_bytes):
        return TWO_SHOT
    return None


def pick(hw: HardwareProfile, names: tuple[str, ...], tp: int, size_bytes: float, dtype: str,
         by_name: bool = False) -> Pick:
    """The first of ``names`` that runs this group and takes this size, else NCCL. ``nvls`` in a
    framework's list is taken only where the profile's multimem table covers the size;
    ``by_name`` (``--allreduce nvls``): at every size, priced by the profile's NCCL model where no
    multimem table covers it."""
    if tp <= 1:
        return NCCL_PICK
    for name in names:
        impl = IMPLEMENTATIONS[name]
        if impl is NCCL:
            return NCCL_PICK
        if why_not(impl, hw, tp, dtype) is not None:
            continue
        kernel = kernel_for(impl, tp, size_bytes)
        if kernel is None:
            continue
        if kernel == MULTIMEM and not by_name and table_time_s(hw, impl, tp, size_bytes) is None:
            continue
        return Pick(impl, kernel)
    return NCCL_PICK


def table_time_s(hw: HardwareProfile, impl: AllReduceImpl, tp: int, size_bytes: float) -> float | None:
    """Seconds from the first of the profile's tables of ``impl`` with two or more rows for ``tp``
    GPUs of one node covering ``size_bytes`` (a multimem table: from its smallest size up, growing
    at its last bandwidth beyond), host launch corrected and the intra-node what-if scales
    applied; None where none does."""
    if impl.table_library is None:
        return None
    for table, cols in hw.allreduce_arrays:
        if not table.library.startswith(impl.table_library):
            continue
        rows = (cols["gpus"] == tp) & (cols["nodes"] == 1)
        sizes, times = cols["size_bytes"][rows], cols["time_s"][rows]
        if len(sizes) >= 2 and sizes[0] <= size_bytes and (impl.needs_multicast or size_bytes <= sizes[-1]):
            seconds = float(scaled_table_s(sizes, times, size_bytes, links(hw).intra))
            return max(seconds + mode_correction_s(hw, table), 0.0)
    return None


def algorithm_time_s(hw: HardwareProfile, impl: AllReduceImpl, kernel: str, tp: int, size_bytes: float) -> float:
    """Seconds of ``impl``'s ``kernel`` from its algorithm over the profile's NVLink: one-shot, one
    phase reading ``(n - 1) S`` from the peers; two-shot, a reduce-scatter and an all-gather
    phase moving ``2 (n - 1) / n S``; each phase ``impl.floor_us``; plus the copies into (and out
    of) the implementation's buffer at the GPU's memory bandwidth (a read and a write each)."""
    intra = links(hw).intra
    busbw = intra.bytes_per_s(hw.collectives.intra_node.bus_bandwidth_gb_per_s.value)
    phases = 1 if kernel == ONE_SHOT else 2
    copies = (impl.input_copies or {}).get(kernel, 0)
    copy_s = copies * 2.0 * size_bytes / hw.gpu.memory_bandwidth_bytes_per_s
    return phases * intra.latency_s(impl.floor_us) + kernel_moved_bytes(kernel, tp, size_bytes) / busbw + copy_s


@lru_cache(maxsize=None)
def _say_algorithm_priced(profile_name: str, impl_name: str) -> None:
    """Once per profile and implementation: no measured table prices it."""
    print(f"note: {profile_name} has no measured {impl_name} table for this group; its one-/two-shot kernels are "
          "priced from their algorithm over the profile's NVLink", file=sys.stderr)


def custom_time_s(hw: HardwareProfile, chosen: Pick, tp: int, size_bytes: float) -> float | None:
    """Seconds of a picked implementation other than NCCL: its table where the profile has one
    covering the message, else its algorithm (stderr says so once per profile and implementation);
    None for NCCL, and for NVLS without a table (NCCL's own model prices it)."""
    if chosen.impl is NCCL:
        return None
    seconds = table_time_s(hw, chosen.impl, tp, size_bytes)
    if seconds is not None or chosen.kernel == MULTIMEM:
        return seconds
    _say_algorithm_priced(hw.name, chosen.impl.name)
    return algorithm_time_s(hw, chosen.impl, chosen.kernel, tp, size_bytes)


# vllm-project/vllm @ 036bb685581dbedcd6cf7fc845fe87268c7d1191 : csrc/custom_all_reduce.cuh (allreduce(...,
# int threads = 512, int block_limit = defaultBlockLimit), defaultBlockLimit 36; blocks = min(block_limit,
# (size + threads - 1) / threads) over 16-byte packed elements). SGLang's kernel is vLLM's; TRT-LLM's and
# PyTorch's are taken with the same grid (no other grid rule is priced).
CTA_THREADS = 512
CTA_LIMIT = 36
PACKED_BYTES = 16


def kernel_ctas(size_bytes: float) -> int:
    """CTAs of a one-/two-shot kernel for a message of ``size_bytes`` (each holds an SM)."""
    return int(min(CTA_LIMIT, max(1, np.ceil(size_bytes / PACKED_BYTES / CTA_THREADS))))


def custom_slowdowns(hw: HardwareProfile, chosen: Pick, tp: int, size_bytes: float) -> tuple[float, float] | None:
    """(compute_slowdown, comm_slowdown) while a custom one-/two-shot kernel overlaps compute (a
    schedule that overlaps its AllReduce, ladder): the kernel's CTAs hold their SMs for its whole
    time, spinning on its peers' flags before and between its phases, so the compute beside it
    runs on the other ``sm_count - ctas`` SMs: ``sm / (sm - ctas) - 1`` longer. The kernel waits for
    SMs the GEMMs hold as NCCL's does: the profile's ``interference.comm_slowdown`` on its time
    above its floor. None where the profile states no SM count (NCCL's interference then)."""
    if hw.gpu.sm_count is None or chosen.kernel not in (ONE_SHOT, TWO_SHOT):
        return None
    sms = hw.gpu.sm_count.value
    ctas = min(kernel_ctas(size_bytes), sms - 1)
    total_s = custom_time_s(hw, chosen, tp, size_bytes) or 0.0
    phases = 1 if chosen.kernel == ONE_SHOT else 2
    floor_s = phases * links(hw).intra.latency_s(chosen.impl.floor_us)
    share = max(0.0, 1.0 - floor_s / total_s) if total_s > 0 else 0.0
    _, comm = hw.interference.at(size_bytes, share, tp)
    return ctas / (sms - ctas), comm


def kernel_moved_bytes(kernel: str, tp: int, size_bytes: float) -> float:
    """Bytes one rank's custom kernel reads from its peers (what its SMs spend their time on)."""
    if kernel == ONE_SHOT:
        return (tp - 1) * size_bytes
    return 2.0 * (tp - 1) / tp * size_bytes if kernel == TWO_SHOT else float(np.nan)


__all__ = ["ALLREDUCE_NAMES", "AllReduceImpl", "Cutoff", "IMPLEMENTATIONS", "MULTIMEM", "NCCL", "NCCL_KERNEL",
           "NCCL_PICK", "ONE_SHOT", "Pick", "TWO_SHOT", "algorithm_time_s", "custom_slowdowns", "custom_time_s",
           "implementation", "kernel_ctas", "kernel_for", "kernel_moved_bytes", "pick", "reduced_dtype",
           "require_runs", "table_time_s", "why_not"]
