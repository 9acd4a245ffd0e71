"""Public origin of each registered measured table: repository, commit and file inside it.

The compact tables under ``hardware_profiles/tables/`` cite these origins in their ``# source:``
line (written by ``tools/fits/resample_reference.py``), so a reader without a local copy of the
originals (the ``reference_data/`` folder LADDERSIM_SHARED names) can still find the rows.
Repositories, commits and paths are those recorded in the PROVENANCE.md of each folder of that copy.
"""

from __future__ import annotations

_AIC = "ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce"
_AWS = "aws-samples/awsome-distributed-training @ 7217859f67bc693c52ff175ccc6082c41dbd7a1b"
_CLUSTER = "xxrjun/nccl-tests-cluster @ 455de4f8dee2fa94cd4044a7109fd8c576f9e6c1"
_CLUSTER_RUNS = "benchmarks/example-cluster01/nccl-benchmark-results"
_KALAVAI = ("kalavai-net/kalavai-client @ 52af06bc8fea76715b3542fda02a00e60a9b4795 : scripts/README.md "
            "(\"Benchmark interconnectivity across GPUs\")")

# Local path (relative to reference_data/) -> "repository @ commit : file (part)".
_FILES = {
    "nccl_tests/aws_p5_h100_1node_nvswitch.csv": f"{_AWS} : micro-benchmarks/nccl-tests/aws-batch/README.md",
    "nccl_tests/aws_p5_h100_2node_efa3200.csv":
        f"{_AWS} : micro-benchmarks/nccl-tests/README.md (section \"Results\", \"2x p5.48xlarge\")",
    "nccl_tests/aws_p4de_a100_2node_efa400.csv": f"{_AWS} : micro-benchmarks/nccl-tests/README.md (\"2x p4de.24xlarg\")",
    "nccl_tests/gcp_a3mega_h100_2node_tcpxo.csv":
        "lessizzmore/create-a3mega-ztan-fork @ 346b825ad3b527ffbd6ba511a09d39df08f04be0 : ztan-NCCL-test-result.markdown",
    "nccl_tests/h100_cluster_1node_8gpu_nvswitch.csv":
        f"{_CLUSTER} : {_CLUSTER_RUNS}/single-node/runs/20260128-145017/without-debug/logs/nccl_N1_G8_cnode3-002.log",
    "nccl_tests/h100_cluster_1node_4gpu_nvswitch.csv":
        f"{_CLUSTER} : {_CLUSTER_RUNS}/single-node/runs/20260128-145017/without-debug/logs/nccl_N1_G4_cnode3-002.log",
    "nccl_tests/h100_cluster_2node_1gpn_net400.csv":
        f"{_CLUSTER} : {_CLUSTER_RUNS}/smoke/runs/20260128-010557/logs/nccl_smoke_N2_G1_cnode3-002_cnode3-003.log",
    **{f"nccl_tests/h100_cluster_10node_{g}gpn_net400.csv":
       f"{_CLUSTER} : {_CLUSTER_RUNS}/multi-node/runs/20260129-180219/without-debug/logs/nccl_N10_G{g}.log"
       for g in (1, 2, 4, 8)},
    **{f"nccl_tests/rtx4090_pcie_1node_{g}gpu_{env}.csv": _KALAVAI for g in (2, 4) for env in ("docker", "k8s")},
    "nccl_tests/azure_ndmv4_a100_hdr_anchor_points.csv":
        "microsoft/mscclpp @ 85e664c2f7151cd2e207afbcd5713684fe7c5b3b : docs/performance-ndmv4.md "
        "(\"NCCL AllReduce\" column)",
    "torch_allreduce_bench/mlengineering_h200_1node_8gpu.csv":
        "stas00/ml-engineering @ c53741b8b7dcc17b152757f104398c6dd6f231b3 : "
        "network/benchmarks/results/all-reduce-8xH200.md",
    "torch_allreduce_bench/mlengineering_b200_1node_vs_4node.csv":
        "stas00/ml-engineering @ 744d01e18b79512572f64a6bbd8b5f4a725203a7 : network/README.md "
        "(section \"Inter-node speed depends on intra-node speed\")",
    "tokenweave/figure_5.csv": "microsoft/tokenweave @ f483d1c431f55734f38b1c039f3ca0e44f465d05 : artifact/csvs/figure_5.csv",
    "p2p_off_pcie/nccl_public/rtx5090_genoa_x2_x4_shm_nccl_tests_287.txt":
        "https://github.com/NVIDIA/nccl-tests/issues/287 (commit: not recorded in provenance; an issue thread, read "
        "from a public mirrored copy) : the 4x RTX 5090 all_reduce_perf table",
    "quoted/ladder-residual-allreduce-microbenchmark":
        "mayank31398/ladder-residual-inference (commit: not recorded in provenance) : the authors' AllReduce "
        "microbenchmark, as quoted for Zhang et al., arXiv 2501.06589",
}


def public_origin(path: str) -> str:
    """``repository @ commit : file`` of the original of one local reference file."""
    if path in _FILES:
        return _FILES[path]
    family, rest = path.split("/", 1)
    if family == "aiconfigurator":  # local <family>/<system>/...; upstream <system>/<family>/..., parquet
        kind, system, tail = rest.split("/", 2)
        tail = tail.replace("gemm_perf_bf16_m_le_8192.csv", "gemm_perf.parquet (bf16, m <= 8192)")
        if kind == "gemm_fp8":  # the FP8 rows of the same upstream GEMM table
            kind, tail = "gemm", tail.replace("gemm_perf_fp8_m_le_8192.csv", "gemm_perf.parquet (fp8, fp8_block, m <= 8192)")
        tail = tail.replace("_perf.csv", "_perf.parquet")
        return f"{_AIC} : aic-core/src/aiconfigurator_core/systems/data/{system}/{kind}/{tail}"
    if family == "vidur":
        return f"microsoft/vidur @ 7d47513363ec447a741ac5e47241580b47724fbf : data/profiling/{rest}"
    if family == "apex_plus":
        return f"microsoft/apex_plus @ 8769096536a34e8b3010fd444021f13858663a93 : profile/{rest}"
    raise KeyError(f"no public origin recorded for reference file {path}")
