"""One GPU's path through host memory: what each hop of NCCL's SHM transport is made of.

With P2P off (``NCCL_P2P_DISABLE=1``, or GPUs on different PCIe roots) NCCL's SHM transport moves
every ring hop through a host buffer: the sending GPU's kernel stores into pinned, mapped host
memory over its PCIe link and the receiving GPU's kernel loads it back (``via SHM/direct/direct``;
with ``NCCL_SHM_USE_CUDA_MEMCPY=1`` the copy engines do it instead). Both halves run on one GPU, so
one GPU measures them: for each message size, the device time of

* ``sm_store``: a kernel of ``--ctas`` thread blocks storing a device buffer into mapped host memory
  (the sender's half: posted PCIe writes),
* ``sm_load``: the same blocks loading mapped host memory into a device buffer (the receiver's half:
  PCIe reads, each a round trip to host memory),
* ``ce_d2h`` / ``ce_h2d``: ``cudaMemcpyAsync`` between device and pinned host memory (copy engines),

each the median over ``--reps`` CUDA-event-timed batches of ``--launches`` back-to-back launches
(per launch: the hop's latency plus its bytes over the link's bandwidth, launch gaps included as a
graph-less NCCL kernel would see them). GPU only: it exits 2 without CUDA.

Writes ``OUT/host_link.csv`` (path, ctas, bytes, us, gbps) and ``OUT/PROVENANCE.md``.

    python calibration/host_link_bench.py --out runs/host_link
"""

from __future__ import annotations

import argparse
import csv
import datetime
import shlex
import statistics
import sys
from pathlib import Path
from typing import Sequence

import torch

SIZES_BYTES = tuple(2 ** k for k in range(12, 24))  # 4 KiB .. 8 MiB: decode and prefill AllReduces


class _HostAlias:
    """A CUDA view of pinned host memory: under unified addressing a ``cudaHostAlloc`` pointer is
    also its device pointer, so kernels given it load and store over PCIe (zero-copy)."""

    def __init__(self, host: torch.Tensor):
        self.__cuda_array_interface__ = {"shape": tuple(host.shape), "typestr": "<f4",
                                         "data": (host.data_ptr(), False), "version": 3, "strides": None}


def _triton_copy():
    import triton
    import triton.language as tl

    @triton.jit
    def copy(src, dst, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK
        for start in range(pid * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)

    def run(src: torch.Tensor, dst: torch.Tensor, ctas: int) -> None:
        copy[(ctas,)](src, dst, src.numel(), BLOCK=1024, num_warps=8)

    return run


def _time_us(fn, launches: int, reps: int) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(launches):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / launches)
    return statistics.median(times)


def measure(ctas_list: Sequence[int], launches: int, reps: int) -> list[dict]:
    n_max = max(SIZES_BYTES) // 4
    host = torch.empty(n_max, dtype=torch.float32, pin_memory=True)
    host.fill_(1.0)
    alias = torch.as_tensor(_HostAlias(host), device="cuda")
    dev = torch.ones(n_max, dtype=torch.float32, device="cuda")
    rows = []
    copy = None
    try:
        copy = _triton_copy()
    except Exception as exc:  # noqa: BLE001 - report and go on with the copy engines
        print(f"[host_link] no Triton copy kernel: {exc}", file=sys.stderr)
    for size in SIZES_BYTES:
        n = size // 4
        h, a, d = host[:n], alias[:n], dev[:n]
        paths = {"ce_d2h": (0, lambda: h.copy_(d, non_blocking=True)),
                 "ce_h2d": (0, lambda: d.copy_(h, non_blocking=True))}
        if copy is not None:
            for ctas in ctas_list:
                paths[f"sm_store/{ctas}"] = (ctas, lambda c=ctas: copy(d, a, c))
                paths[f"sm_load/{ctas}"] = (ctas, lambda c=ctas: copy(a, d, c))
        for name, (ctas, fn) in paths.items():
            try:
                us = _time_us(fn, launches, reps)
            except Exception as exc:  # noqa: BLE001 - one path failing leaves the others
                print(f"[host_link] {name} {size} B failed: {exc}", file=sys.stderr)
                continue
            rows.append({"path": name.split("/")[0], "ctas": ctas, "bytes": size, "us": round(us, 3),
                         "gbps": round(size / us / 1e3, 3)})
        print(f"[host_link] {size} B: " + ", ".join(f"{r['path']}/{r['ctas']} {r['us']:.1f} us"
                                                   for r in rows if r["bytes"] == size), file=sys.stderr)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="host_link_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--ctas", default="1,2,4,16", help="comma-separated thread-block counts of the SM copies")
    p.add_argument("--launches", type=int, default=20, help="back-to-back launches per timed batch")
    p.add_argument("--reps", type=int, default=15, help="timed batches (the median is kept)")
    p.add_argument("--out", required=True, help="directory for host_link.csv and PROVENANCE.md")
    args = p.parse_args(argv)
    try:
        ctas = [int(v) for v in args.ctas.split(",")]
        if not ctas or min(ctas) < 1:
            raise ValueError
    except ValueError:
        print(f"error: --ctas: comma-separated integers >= 1, got '{args.ctas}'", file=sys.stderr)
        return 2
    if min(args.launches, args.reps) < 1:
        print("error: --launches and --reps: integers >= 1", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: host_link_bench needs a CUDA GPU (it times PCIe traffic to host memory)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = measure(ctas, args.launches, args.reps)
    with (out / "host_link.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "ctas", "bytes", "us", "gbps"], lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    props = torch.cuda.get_device_properties(0)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    (out / "PROVENANCE.md").write_text(
        f"# Host-memory path of one GPU (NCCL SHM transport's halves)\n\n"
        f"- command: `python calibration/host_link_bench.py {shlex.join(argv)}`\n- date (UTC): {stamp}\n"
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}\n- GPU: {props.name}, {props.multi_processor_count} SMs\n")
    print(f"host link: {len(rows)} rows in {out / 'host_link.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
