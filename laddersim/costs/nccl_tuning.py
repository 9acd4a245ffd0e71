"""NCCL's own latency and bandwidth constants for AllReduce (NVIDIA/nccl ``src/graph/tuning.cc``).

Read from NVIDIA/nccl @ 5067397c (2.30.7; ``src/graph/tuning.cc``, the
base-latency, hardware-latency and llMaxBws tables). Per (algorithm, protocol): a base latency, a per-hop latency on each hardware tier, and
the share of a link's bandwidth the protocol carries as data. Indexed by ``PROTOCOLS``.
"""

from __future__ import annotations

PROTOCOLS = ("ll", "ll128", "simple")
ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "collnet")

# baseLatencies[algo][proto], us (Table A). NVLS/NVLS-tree/CollNet have none (0).
BASE_LATENCY_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4),
                   "nvls_tree": (0.0, 0.0, 0.0), "collnet": (0.0, 0.0, 0.0)}
# hwLatencies[NVLINK|PCI][algo][proto], us per intra-node hop (Table B).
INTRA_HOP_US = {"nvlink": {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0)},
                "pci": {"ring": (1.0, 2.5, 5.7), "tree": (1.0, 1.9, 4.0)}}
# hwLatencies[NET][algo][proto], us per network hop, before the fabric's own latency (Table B);
# None: the algorithm has no such protocol (NVLS-tree and CollNet run Simple only).
NET_HOP_US = {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0),
              "nvls_tree": (None, None, 20.9), "collnet": (None, None, 31.0)}
# hwLatencies[NVLINK][NVLS][Simple]: the in-switch reduction of one node, us.
NVLS_INTRA_US = 25.0
# With more than one node an intra-node hop costs at least the network proxy's overhead
# (netOverhead 1.0 us on Intel hosts, x3 for Simple).
NET_OVERHEAD_US = (1.0, 1.0, 3.0)
# Bandwidth share a protocol carries as data: LL 8-byte lines with 4 B of flag (0.5), LL128 120
# of 128 bytes (0.92 ring, 120/128 tree across nodes), Simple all; the tree's LL is NCCL's 1/3.8.
RING_EFFICIENCY = (0.5, 0.92, 1.0)
TREE_EFFICIENCY = (1.0 / 3.8, 120.0 / 128.0, 1.0)
# llMaxBws for multi-node groups (Intel/other host row): LL's bus bandwidth cap, GB/s.
LL_MAX_BUSBW_GB_PER_S = {2: 39.0, 3: 20.4}  # key: nodes (3 = more than two)
# A tree's algorithm bandwidth per unit of its bus bandwidth: NCCL caps every protocol's bus
# bandwidth (llMaxBw, the per-channel LL128 caps) and then converts it, ``ratio *= .5`` for a tree
# where a ring takes nRanks / nsteps (tuning.cc, ncclTopoTuneModel, "Convert bus BW to algorithm
# BW" at NVIDIA/nccl HEAD, src/graph/tuning.cc lines 376-381), so a cap
# bounds a tree's algorithm bandwidth at half its value.
TREE_ALGBW_PER_BUSBW = 0.5
# treeCorrectionFactor[proto][log2(nBytes / 64)]: NCCL's own correction of the tree AllReduce's
# bandwidth for medium messages, powers of two from 64 B to 256 MiB, 1.0 outside (NCCL's comment:
# "Trees are not perfectly sticking to the model for medium sizes"; tuning.cc, ncclTopoGetAlgoTime,
# applied to NCCL_ALGO_TREE AllReduce for log2 < 23). As in NVIDIA/nccl src/graph/tuning.cc at
# HEAD, src/graph/tuning.cc lines 623-627 (its rows
# have a 24th entry, used by NVLS-tree on Blackwell x86 hosts only); the LL128 row was recalled
# wrongly here before (1.0 to 2^12 x 64 B, then 0.8-0.6). Checked against the public 2-node x 8 H100
# sweeps (tests/test_nccl_algorithms.py): their rise from 4 KiB to 512 KiB is 45-47 us over two fabrics.
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)
