"""A collective that needs NCCL's proxy thread, replayed inside a CUDA graph: the host node NCCL
adds for it (``graph_host_node_s``).

What NCCL does (NVIDIA/nccl src/enqueue.cc, ``ncclLaunchPrepare``, as of 2.18-2.20, the paper's
2.20.5 included; recalled from the source, which is not fetchable here): a kernel plan whose connections have proxy work (``plan->hasProxyOps``: the
transport has a ``proxyProgress``, i.e. the network, IB or a net plugin such as EFA's or TCPXO's,
and CollNet; within a node P2P and SHM only in their copy-engine modes NCCL_P2P_USE_CUDA_MEMCPY /
NCCL_SHM_USE_CUDA_MEMCPY, off by default, and NVLS none) must have its proxy operations posted
before its kernel can progress. Launched eagerly with no CUDA graph alive, the calling thread posts
them right after the kernel launch (``ncclLaunchKernelAfter_NoCuda`` -> ``hostStreamPlanTask``):
nothing on the GPU waits for the host. While the launch is captured (``persistent``), or once a
captured graph holds a plan of the communicator (``comm->persistentRefs != 0``), NCCL instead
launches ``hostStreamPlanCallback`` on its host stream (``ncclStrongStreamLaunchHost``:
``cudaLaunchHostFunc``, a graph host node under capture) and makes the kernel's stream wait on it
("We have to launch host tasks to push proxy args. We are careful to only do this if necessary
since host tasks impose a high performance cost in CUDA."). Every replay of the graph then runs one
host function per network collective, and the collective's kernel depends on it.

Where the time lands: by the captured dependencies alone a host node follows only NCCL's previous
host-stream node, so it could run ahead of the GPU; the one measurement of graph-captured network
collectives (laddersim/data/validation/ladder_405b_2node.csv: 405B, TP 16 over 2 nodes, gpt-fast's
compiled decode) says it does not: priced on the collective's stream, ladder hides it whole at
batch 1 (its compute beside each collective is longer), yet the measured ladder decode exposes
~5 us more per AllReduce than predicted without it, at batch 1 and 8 alike, which no overlap
hides. So it is priced where those rows put it, on the compute stream at the collective's launch
(the ``collective_launch`` op), as the graph reaching the host node in its captured order would
(how CUDA schedules a graph's host nodes is not documented). Its size is the profile's
``framework.graph_host_node_us``, a per-host figure (the CUDA driver's host-function round trip),
fitted to those rows (tools/fits/fit_graph_host_node.py): no public figure for a graph host node's or a
``cudaLaunchHostFunc``'s latency was found among the project's sources.

Eager passes do not pay it: without a graph NCCL posts from the calling thread; with one alive (a
compiled prefill once the decode graph is captured, gpt-fast's) the host function runs on NCCL's
own idle host stream as soon as the CPU enqueues it, ahead of a GPU the CPU runs ahead of. A pass
is graph-captured where the framework says so (``cuda_graph_passes``) and the profile simulates
CUDA-graph replay (``collectives.mode: graph``).
"""

from __future__ import annotations

from laddersim.hardware.profile import HardwareProfile


def needs_proxy(hw: HardwareProfile, tp: int) -> bool:
    """Does a TP group of ``tp`` ranks reduce over a transport with proxy work: across nodes (the
    network); within a node, NCCL's default P2P, SHM and NVLS transports have none."""
    return tp > 1 and hw.nodes_for(tp) > 1


def graph_host_node_s(hw: HardwareProfile, fw, tp: int, phase_name: str) -> float:
    """Seconds the compute stream waits, per collective of a ``tp``-rank group in a ``phase_name``
    pass (``prefill`` or ``decode``) under framework ``fw``, for the host node NCCL adds in a
    CUDA graph: the profile's ``framework.graph_host_node_us`` where the pass is captured and the
    group reduces over the network, else 0."""
    captured = fw.cuda_graph_passes is not None and phase_name in fw.cuda_graph_passes.value
    if not (captured and hw.collectives.mode == "graph" and needs_proxy(hw, tp)):
        return 0.0
    return hw.framework.graph_host_node_us.value * 1e-6
