"""Registry of the public measured tables a profile is compared with, and readers for their
ORIGINAL rows: the public measurement files as published (each source names its repository file;
``laddersim.profiles_check.origins`` its commit), kept in a ``reference_data/`` folder outside the
repository that a user names with the environment variable ``LADDERSIM_SHARED`` (the folder
holding ``reference_data/``); nothing is looked up anywhere else.

Every reader returns the rows of one source file in a common frame
``gpus, nodes, size_bytes, time_us`` (AllReduce) or ``m, n, k, time_us`` (GEMM), without
resampling: duplicate runs stay as separate rows. ``tools/fits/resample_reference.py`` turns them into
the compact tables shipped under ``hardware_profiles/tables/``; the check compares the model with
these original rows when ``LADDERSIM_SHARED`` names them and with the shipped rows otherwise.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

KIB = 1024
MIB = 1024 * KIB
# The accuracy window a profile is judged over: the message sizes of a decode or prefill AllReduce
# of the models laddersim prices (tens of KiB to hundreds of MiB).
CHECK_MIN_BYTES = 4 * KIB
CHECK_MAX_BYTES = 256 * MIB
REFERENCE_DATA_VARIABLE = "LADDERSIM_SHARED"  # names the folder that holds reference_data/
# The key of the one source that is a number quoted in the paper's material rather than a file.
QUOTED_LADDER_POINT = "quoted/ladder-residual-allreduce-microbenchmark"


def reference_data_root() -> Path | None:
    """``$LADDERSIM_SHARED/reference_data``, the original measurement files, where the user names
    a folder holding it; None otherwise."""
    given = os.environ.get(REFERENCE_DATA_VARIABLE)
    if not given:
        return None
    data = Path(given) / "reference_data"
    return data if data.is_dir() else None


@dataclass(frozen=True)
class AllReduceSource:
    """One public AllReduce table.

    ``timing``: ``loop`` = average of a back-to-back loop (host launch hidden, close to CUDA-graph
    replay); ``single`` = one collective bracketed by CUDA events (host launch and peer skew
    included); ``kernel`` = NCCL kernel time from the profiler (no launch).
    """

    key: str  # also the shipped file name: hardware_profiles/tables/<key>.csv
    path: str  # relative to reference_data/
    reader: str  # name of a reader function below
    rows: str  # which rows were taken (filter), for the source comments
    library: str  # library and version, as recorded (or "not recorded")
    mode: str  # eager | graph
    timing: str  # loop | single | kernel
    note: str = ""
    gpus: tuple[int, ...] = ()  # the GPU counts kept (empty: every count the file measures)


def _aic_nccl(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    rows = raw[(raw["op_name"] == "all_reduce") & (raw["nccl_dtype"] == "half")]
    return pd.DataFrame({"gpus": rows["num_gpus"], "nodes": 1, "size_bytes": 2.0 * rows["message_size"],
                         "time_us": rows["latency"] * 1e3})


def _aic_custom_graph(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    rows = raw[raw["kernel_source"].str.endswith("_graph") | (raw["kernel_source"] == "TRTLLM")]
    return pd.DataFrame({"gpus": rows["num_gpus"], "nodes": 1, "size_bytes": 2.0 * rows["message_size"],
                         "time_us": rows["latency"] * 1e3})


def _vidur(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    collective = str(raw["collective"].iloc[0])  # all_reduce or send_recv: one per file
    return pd.DataFrame({"gpus": raw["num_workers"], "nodes": raw["num_workers"] // raw["devices_per_node"],
                         "size_bytes": raw["size"].astype(float),
                         "time_us": raw[f"time_stats.{collective}.median"] * 1e3})


def _apex(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    rows = raw[raw["dtype"] == "half"]
    # size(kb) is int(bytes / 1024): 0 means 512 B (PROVENANCE.md); larger values are exact.
    size = np.where(rows["size(kb)"] == 0, 512.0, rows["size(kb)"] * 1024.0)
    return pd.DataFrame({"gpus": rows["num_nodes"] * rows["num_gpus_per_node"], "nodes": rows["num_nodes"],
                         "size_bytes": size, "time_us": rows["time(us)"].astype(float)})


def _nccl_tests(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    return pd.DataFrame({"gpus": raw["ngpus"], "nodes": raw["nnodes"], "size_bytes": raw["size_bytes"].astype(float),
                         "time_us": raw["time_us"].astype(float)})


def _stas00(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    return pd.DataFrame({"gpus": raw["ngpus"], "nodes": raw["nnodes"], "size_bytes": raw["size_bytes"].astype(float),
                         "time_us": raw["time_us_derived"].astype(float)})


def _tokenweave(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    return pd.DataFrame({"gpus": 8, "nodes": 1, "size_bytes": raw["BL"] * raw["hidden_size"] * 2.0,
                         "time_us": raw["pytorch_dist_ar_us"].astype(float)})


def _tokenweave_multimem(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    return _tokenweave(path).assign(time_us=raw["multimem_ar_us"].astype(float))


def _ladder_point(path: Path) -> pd.DataFrame:
    """A number quoted, not a file (``path`` is not read): the authors' AllReduce microbenchmark as
    quoted for arXiv 2501.06589, an 8-GPU AllReduce of 4 MiB (1M fp32) in 78.6 us with P2P on and
    135.4 us with P2P off. Only the P2P-off number."""
    del path
    return pd.DataFrame({"gpus": [8], "nodes": [1], "size_bytes": [4.0 * MIB], "time_us": [135.4]})


def _nccl_tests_log(path: Path) -> pd.DataFrame:
    """The all_reduce_perf table of a trimmed nccl-tests log (text as printed): every row after the
    command line naming ``-g N`` (N GPUs), its out-of-place time; the first table of the file."""
    gpus, rows = None, []
    for line in path.read_text().splitlines():
        command = re.search(r"all_reduce_perf .*-g (\d+)", line)
        if command and gpus is None:
            gpus = int(command.group(1))
            continue
        fields = line.split()
        if gpus is not None and len(fields) >= 6 and fields[0].isdigit() and fields[1].isdigit():
            rows.append((float(fields[0]), float(fields[5])))
        elif gpus is not None and rows and line.startswith("#"):
            break  # the table ended
    if not rows:
        raise ValueError(f"{path}: no all_reduce_perf table after a '-g N' command line")
    sizes, times = zip(*rows)
    return pd.DataFrame({"gpus": gpus, "nodes": 1, "size_bytes": sizes, "time_us": times})


READERS = {f.__name__.lstrip("_"): f for f in
           (_aic_nccl, _aic_custom_graph, _vidur, _apex, _nccl_tests, _stas00, _tokenweave, _tokenweave_multimem,
            _ladder_point, _nccl_tests_log)}

_AIC_LOOP = ("nccl-tests all_reduce_perf -w 40 -n 100/60 -c 0, out-of-place time, no CUDA graphs "
             "(aiconfigurator PROVENANCE.md)")

# The frameworks' own all-reduce tables shipped per system: the newest version AIConfigurator
# measured on each (aiconfigurator PROVENANCE.md), and the kernel_source of its CUDA-graph rows.
_CUSTOM_TABLES = (("h100_sxm", "trtllm", "1.3.0rc20"), ("h100_sxm", "sglang", "0.5.14"),
                  ("h200_sxm", "vllm", "0.24.0"), ("h200_sxm", "trtllm", "1.3.0rc20"), ("h200_sxm", "sglang", "0.5.14"),
                  ("b200_sxm", "vllm", "0.24.0"), ("b200_sxm", "trtllm", "1.3.0rc20"), ("b200_sxm", "sglang", "0.5.14"),
                  ("a100_sxm", "vllm", "0.14.0"), ("a100_sxm", "trtllm", "1.0.0"), ("a100_sxm", "sglang", "0.5.10"),
                  ("l40s", "vllm", "0.14.0"), ("l40s", "trtllm", "1.0.0"), ("l40s", "sglang", "0.5.14"))
_CUSTOM_KERNELS = {"vllm": ("vLLM_custom_graph", "vLLM"), "trtllm": ("TRTLLM (AllReduceStrategy.AUTO)", "TRT-LLM"),
                   "sglang": ("SGLang_CustomAllReduce_graph", "SGLang")}

ALLREDUCE_SOURCES: dict[str, AllReduceSource] = {s.key: s for s in (
    AllReduceSource("aic_h100_sxm_nccl_2.29.2", "aiconfigurator/comm/h100_sxm/nccl/2.29.2/nccl_perf.csv",
                    "aic_nccl", "op_name=all_reduce, nccl_dtype=half; bytes=2*message_size, us=latency*1e3",
                    "NCCL 2.29.2 (version column)", "eager", "loop", _AIC_LOOP),
    AllReduceSource("aic_h200_sxm_nccl_2.29.2", "aiconfigurator/comm/h200_sxm/nccl/2.29.2/nccl_perf.csv",
                    "aic_nccl", "op_name=all_reduce, nccl_dtype=half; bytes=2*message_size, us=latency*1e3",
                    "NCCL 2.29.2 (version column)", "eager", "loop", _AIC_LOOP),
    AllReduceSource("aic_a100_sxm_nccl_2.27.3", "aiconfigurator/comm/a100_sxm/nccl/2.27.3/nccl_perf.csv",
                    "aic_nccl", "op_name=all_reduce, nccl_dtype=half; bytes=2*message_size, us=latency*1e3",
                    "NCCL 2.27.3 (version column)", "eager", "loop", _AIC_LOOP),
    AllReduceSource("aic_l40s_nccl_2.27.3", "aiconfigurator/comm/l40s/nccl/2.27.3/nccl_perf.csv",
                    "aic_nccl", "op_name=all_reduce, nccl_dtype=half; bytes=2*message_size, us=latency*1e3",
                    "NCCL 2.27.3 (version column)", "eager", "loop",
                    _AIC_LOOP + "; PROVENANCE: busbw collapses with GPU count, a degraded PCIe node"),
    AllReduceSource("aic_l40s_nccl_2.27.3_2gpu", "aiconfigurator/comm/l40s/nccl/2.27.3/nccl_perf.csv",
                    "aic_nccl", "op_name=all_reduce, nccl_dtype=half, num_gpus=2; bytes=2*message_size, us=latency*1e3",
                    "NCCL 2.27.3 (version column)", "eager", "loop",
                    _AIC_LOOP + "; the 2-GPU rows only: 20 GB/s busbw, P2P within one PCIe Gen4 x16 switch; "
                    "PROVENANCE: busbw collapses from 4 GPUs on, a degraded PCIe node", gpus=(2,)),
    AllReduceSource("aic_b200_sxm_nccl_2.29.2", "aiconfigurator/comm/b200_sxm/nccl/2.29.2/nccl_perf.csv",
                    "aic_nccl", "op_name=all_reduce, nccl_dtype=half; bytes=2*message_size, us=latency*1e3",
                    "NCCL 2.29.2 (version column)", "eager", "loop", _AIC_LOOP),
    AllReduceSource("aic_h100_sxm_vllm_0.24.0_graph",
                    "aiconfigurator/comm/h100_sxm/vllm/0.24.0/custom_allreduce_perf.csv", "aic_custom_graph",
                    "kernel_source=vLLM_custom_graph; bytes=2*message_size", "vLLM 0.24.0 custom all-reduce",
                    "graph", "loop", "5 all-reduces per CUDA graph, 20 replays; one-/two-shot custom kernels "
                    "for small sizes, NCCL above: a different algorithm from NCCL's"),
    *(AllReduceSource(f"aic_{system}_{fw}_{ver}_graph",
                      f"aiconfigurator/comm/{system}/{fw}/{ver}/custom_allreduce_perf.csv", "aic_custom_graph",
                      f"kernel_source={kernel}; bytes=2*message_size", f"{label} {ver} custom all-reduce",
                      "graph", "loop", f"5 all-reduces per CUDA graph, 20 replays; {label}'s TP all-reduce path "
                      "as served (its one-/two-shot kernels for small sizes, NCCL or another backend above)")
      for system, fw, ver in _CUSTOM_TABLES
      for kernel, label in (_CUSTOM_KERNELS[fw],)
      if (system, fw) != ("h100_sxm", "vllm")),
    AllReduceSource("vidur_h100_dgx", "vidur/network/h100_dgx/all_reduce.csv", "vidur",
                    "all rows; time_stats.all_reduce.median (ms) * 1e3", "NCCL via torch.distributed, version not recorded",
                    "eager", "kernel", "NCCL kernel time from torch.profiler (Vidur PROVENANCE.md)"),
    AllReduceSource("vidur_a100_dgx", "vidur/network/a100_dgx/all_reduce.csv", "vidur",
                    "all rows (1 and 2 nodes); time_stats.all_reduce.median (ms) * 1e3",
                    "NCCL via torch.distributed, version not recorded", "eager", "kernel",
                    "NCCL kernel time; inter-node fabric undocumented (DGX A100: HDR InfiniBand)"),
    AllReduceSource("vidur_a100_pairwise_nvlink", "vidur/network/a100_pairwise_nvlink/all_reduce.csv", "vidur",
                    "all rows; time_stats.all_reduce.median (ms) * 1e3", "NCCL via torch.distributed, version not recorded",
                    "eager", "kernel", "Azure NC96ads A100 v4: 4x A100 PCIe, NVLink bridges between pairs"),
    AllReduceSource("apex_h100_sxm", "apex_plus/comm/H100-SXM-80GB/all_reduce.csv", "apex",
                    "dtype=half; size(kb)*1024 (0 -> 512 B)", "CuPy NCCL, version not recorded (README: NCCL 2.18.3)",
                    "eager", "loop", "host-timed loop of back-to-back collectives; times truncated to integer us"),
    AllReduceSource("apex_h200_sxm", "apex_plus/comm/H200-SXM-141GB/all_reduce.csv", "apex",
                    "dtype=half; size(kb)*1024 (0 -> 512 B)", "CuPy NCCL, version not recorded (README: NCCL 2.18.3)",
                    "eager", "loop", "host-timed loop of back-to-back collectives; times truncated to integer us"),
    AllReduceSource("nccltests_aws_p5_h100_1node", "nccl_tests/aws_p5_h100_1node_nvswitch.csv", "nccl_tests",
                    "all rows, out-of-place time_us", "NCCL not printed", "eager", "loop", "AWS p5.48xlarge, float"),
    AllReduceSource("nccltests_h100_cluster_1node", "nccl_tests/h100_cluster_1node_8gpu_nvswitch.csv", "nccl_tests",
                    "all rows, out-of-place time_us", "NCCL 2.29.2", "eager", "loop", "double, 32 MiB and up"),
    AllReduceSource("nccltests_h100_cluster_1node_4gpu", "nccl_tests/h100_cluster_1node_4gpu_nvswitch.csv",
                    "nccl_tests", "all rows, out-of-place time_us", "NCCL 2.29.2", "eager", "loop",
                    "double, 32 MiB and up"),
    AllReduceSource("nccltests_h100_cluster_2node_1gpn", "nccl_tests/h100_cluster_2node_1gpn_net400.csv",
                    "nccl_tests", "all rows, out-of-place time_us", "NCCL 2.29.2", "eager", "loop",
                    "2 nodes x 1 GPU, 400 Gb/s-class NIC (IB NDR or RoCE, not stated)"),
    *(AllReduceSource(f"nccltests_h100_cluster_10node_{g}gpn", f"nccl_tests/h100_cluster_10node_{g}gpn_net400.csv",
                      "nccl_tests", "all rows, out-of-place time_us", "NCCL 2.29.2", "eager", "loop",
                      f"10 nodes x {g} GPUs, 400 Gb/s-class NIC per GPU") for g in (1, 2, 4, 8)),
    AllReduceSource("nccltests_aws_p5_h100_2node_efa", "nccl_tests/aws_p5_h100_2node_efa3200.csv", "nccl_tests",
                    "all rows, out-of-place time_us", "NCCL not printed", "eager", "loop",
                    "AWS EFA v2 (SRD), not InfiniBand"),
    AllReduceSource("nccltests_gcp_a3mega_h100_2node_tcpxo", "nccl_tests/gcp_a3mega_h100_2node_tcpxo.csv",
                    "nccl_tests", "all rows, out-of-place time_us", "NCCL not printed", "eager", "loop",
                    "GCP A3 Mega, GPUDirect-TCPXO 8x 200 Gb/s Ethernet per VM, not InfiniBand"),
    AllReduceSource("nccltests_aws_p4de_a100_2node_efa", "nccl_tests/aws_p4de_a100_2node_efa400.csv", "nccl_tests",
                    "all rows, out-of-place time_us", "NCCL not printed", "eager", "loop",
                    "AWS EFA v1 4x100 Gb/s per node, not 8x HDR InfiniBand"),
    AllReduceSource("nccltests_azure_ndmv4_anchors", "nccl_tests/azure_ndmv4_a100_hdr_anchor_points.csv",
                    "nccl_tests", "all 7 rows (1 KiB latency, 1-4 GiB busbw)", "NCCL 2.17.1", "eager", "loop",
                    "in-place; 8x HDR InfiniBand; only 1 KiB and >= 1 GiB points exist"),
    *(AllReduceSource(f"nccltests_rtx4090_{g}gpu_{env}", f"nccl_tests/rtx4090_pcie_1node_{g}gpu_{env}.csv",
                      "nccl_tests", "all rows, out-of-place time_us", "NCCL not printed (pytorch:24.01 image)",
                      "eager", "loop", "RTX 4090, GPU P2P unavailable: host-staged (SHM) transfers")
      for g in (2, 4) for env in ("docker", "k8s")),
    AllReduceSource("stas00_h200_1node", "torch_allreduce_bench/mlengineering_h200_1node_8gpu.csv", "stas00",
                    "all rows, time_us_derived", "NCCL 2.27.7, torch 2.9.1", "eager", "single",
                    "one dist.all_reduce after a barrier, CUDA events: launch and skew included"),
    AllReduceSource("stas00_b200", "torch_allreduce_bench/mlengineering_b200_1node_vs_4node.csv", "stas00",
                    "all rows, time_us_derived", "NCCL 2.27.7, torch 2.9.1", "eager", "single",
                    "1 node and 4 nodes (AWS EFA v4); launch and skew included"),
    AllReduceSource("tokenweave_h100_fig5", "tokenweave/figure_5.csv", "tokenweave",
                    "pytorch_dist_ar_us; bytes = BL*hidden_size*2", "NCCL bundled with torch 2.6.0", "eager", "single",
                    "median of single CUDA-event-timed torch.distributed.all_reduce, L2 flushed"),
    AllReduceSource("tokenweave_h100_fig5_multimem", "tokenweave/figure_5.csv", "tokenweave_multimem",
                    "multimem_ar_us (best CTA count per BL); bytes = BL*hidden_size*2",
                    "multimem (TokenWeave NVLS all-reduce kernel)", "eager", "single",
                    "median of single CUDA-event-timed multimem (NVLS) all-reduce kernels, L2 flushed"),
    AllReduceSource("nccltests_shm_rtx5090_4gpu", "p2p_off_pcie/nccl_public/rtx5090_genoa_x2_x4_shm_nccl_tests_287.txt",
                    "nccl_tests_log", "the 4-GPU all_reduce_perf table (8 B-128 MiB), out-of-place time", "NCCL 2.26.2",
                    "eager", "loop", "4x GeForce RTX 5090 PCIe on AMD EPYC Genoa, GPU P2P unsupported: SHM transport "
                    "(the same thread's 2-GPU INIT log: 'via SHM/direct/direct', 2 coll channels, 0 nvls channels)"),
    AllReduceSource("ladder_paper_p2p_off_point", QUOTED_LADDER_POINT, "ladder_point",
                    "the 8-GPU 4 MiB P2P-off number (135.4 us)", "NCCL 2.20.5", "eager", "single",
                    "authors' repo microbenchmark, NCCL_P2P_DISABLE=1"),
)}


# Point-to-point send/recv tables (one pair: gpus 2; nodes 1 inside a node, 2 across two), in the
# AllReduce tables' columns: a pipeline's stage boundary (laddersim.costs.point_to_point).
SENDRECV_SOURCES: dict[str, AllReduceSource] = {s.key: s for s in (
    *(AllReduceSource(f"apex_{gpu}_sendrecv", f"apex_plus/comm/{folder}/sendrecv.csv", "apex",
                      "dtype=half; size(kb)*1024 (0 -> 512 B); rank 0 sends to rank 1 of one node (NVLink)",
                      "CuPy NCCL, version not recorded (README: NCCL 2.18.3)", "eager", "loop",
                      "host-timed loop of back-to-back send/recv pairs; times truncated to integer us")
      for gpu, folder in (("h100_sxm", "H100-SXM-80GB"), ("h200_sxm", "H200-SXM-141GB"))),
    AllReduceSource("vidur_a100_dgx_sendrecv", "vidur/network/a100_dgx/send_recv.csv", "vidur",
                    "all rows (2 GPUs of one node, and of two nodes); time_stats.send_recv.median (ms) * 1e3",
                    "NCCL via torch.distributed, version not recorded", "eager", "kernel",
                    "NCCL kernel time of rank 0's send; inter-node fabric undocumented (DGX A100: HDR InfiniBand)"),
)}


def read_allreduce_source(key: str, root: Path | None = None) -> pd.DataFrame:
    """Original rows of one registered source (``root``: default ``reference_data_root()``),
    AllReduce or send/recv; sorted, integer counts."""
    src = ALLREDUCE_SOURCES.get(key) or SENDRECV_SOURCES[key]
    root = root or reference_data_root()
    if root is None:
        raise FileNotFoundError("the original measurement files (reference_data/) are not named; set "
                                f"{REFERENCE_DATA_VARIABLE} to the folder holding them")
    frame = READERS[src.reader](root / src.path)
    if src.gpus:
        frame = frame[frame["gpus"].isin(src.gpus)]
    frame = frame.astype({"gpus": int, "nodes": int, "size_bytes": float, "time_us": float})
    return frame.sort_values(["gpus", "nodes", "size_bytes"], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class GemmSource:
    key: str
    path: str
    rows: str
    note: str


GEMM_SOURCES: dict[str, GemmSource] = {s.key: s for s in (
    GemmSource(f"aic_gemm_{gpu}_{fw}_{ver}", f"aiconfigurator/gemm/{gpu}/{fw}/{ver}/gemm_perf_bf16_m_le_8192.csv",
               "all rows (bf16, m <= 8192 as copied); us = latency*1e3",
               f"{fw} {ver} GEMM under a CUDA graph, several weight copies (aiconfigurator PROVENANCE.md)")
    for gpu, fw, ver in (("h100_sxm", "vllm", "0.24.0"), ("h100_sxm", "trtllm", "1.3.0rc20"),
                         ("h200_sxm", "vllm", "0.24.0"), ("a100_sxm", "sglang", "0.5.10"),
                         ("l40s", "vllm", "0.24.0"), ("b200_sxm", "vllm", "0.24.0"))
)}


# Quantized GEMM tables (AIConfigurator's vLLM 0.24.0 FP8 rows, laddersim.costs.quantized_gemm):
# per-tensor ``fp8`` (CUTLASS scaled-mm under a CUDA graph, the activation quantization included)
# and block-scaled ``fp8_block``, whose rows were timed without a CUDA graph: below m = 1024 their
# times are the host's launch cost (~60-100 us at any shape), not the kernel's, so only m >= 1024
# is kept (``min_m``).
@dataclass(frozen=True)
class QuantizedGemmSource:
    key: str
    path: str
    gemm_dtype: str
    min_m: int
    rows: str
    note: str


QUANTIZED_GEMM_SOURCES: dict[str, QuantizedGemmSource] = {s.key: s for s in (
    QuantizedGemmSource(
        f"aic_gemm_{dtype}_{gpu}_vllm_0.24.0", f"aiconfigurator/gemm_fp8/{gpu}/vllm/0.24.0/gemm_perf_fp8_m_le_8192.csv",
        dtype, min_m, f"gemm_dtype == '{dtype}', m >= {min_m} (m <= 8192 as copied); us = latency*1e3",
        note)
    for gpu in ("h100_sxm", "h200_sxm", "b200_sxm")
    for dtype, min_m, note in (
        ("fp8", 1, "vllm 0.24.0 per-tensor FP8 GEMM (CutlassFP8ScaledMMLinearKernel, dynamic per-tensor activation "
                   "quantization included) under a CUDA graph, 6 weight copies (aiconfigurator PROVENANCE.md)"),
        ("fp8_block", 1024, "vllm 0.24.0 block-scaled FP8 GEMM (128x128 weight blocks, per-token-group activation "
                            "quantization included), timed without a CUDA graph: rows below m = 1024 dropped "
                            "(host launch cost, ~60-100 us at every shape) (aiconfigurator PROVENANCE.md)"))
)}


def read_quantized_gemm_source(key: str, root: Path | None = None) -> pd.DataFrame:
    """Original rows ``m, n, k, time_us`` of one quantized GEMM table, its dtype's rows from ``min_m``."""
    root = root or reference_data_root()
    if root is None:
        raise FileNotFoundError("the original measurement files (reference_data/) are not named; set "
                                f"{REFERENCE_DATA_VARIABLE} to the folder holding them")
    source = QUANTIZED_GEMM_SOURCES[key]
    raw = pd.read_csv(root / source.path, usecols=["gemm_dtype", "m", "n", "k", "latency"])
    raw = raw[(raw["gemm_dtype"] == source.gemm_dtype) & (raw["m"] >= source.min_m)]
    frame = pd.DataFrame({"m": raw["m"].astype(int), "n": raw["n"].astype(int), "k": raw["k"].astype(int),
                          "time_us": raw["latency"] * 1e3})
    return frame.sort_values(["n", "k", "m"], kind="stable").reset_index(drop=True)


def read_gemm_source(key: str, root: Path | None = None) -> pd.DataFrame:
    """Original rows ``m, n, k, time_us`` of one GEMM table (``root``: default ``reference_data_root()``)."""
    root = root or reference_data_root()
    if root is None:
        raise FileNotFoundError("the original measurement files (reference_data/) are not named; set "
                                f"{REFERENCE_DATA_VARIABLE} to the folder holding them")
    raw = pd.read_csv(root / GEMM_SOURCES[key].path, usecols=["m", "n", "k", "latency"])
    frame = pd.DataFrame({"m": raw["m"].astype(int), "n": raw["n"].astype(int), "k": raw["k"].astype(int),
                          "time_us": raw["latency"] * 1e3})
    return frame.sort_values(["n", "k", "m"], kind="stable").reset_index(drop=True)
