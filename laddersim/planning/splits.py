"""Which TP x PP (x EP) split of the GPUs meets the target, and why each does or does not.

For every (profile, TP, PP, EP) the plan simulated (EP: a mixture-of-experts model's experts placed
over each TP group, ``laddersim.model.moe``): its cheapest option meeting the target (schedule,
batch) and one reason, from the simulated rows:

* **weights do not fit**: no batch fits in memory (the memory line's need and capacity);
* **misses the target**: it fits but no schedule and batch reaches it (the fastest it gets);
* otherwise what its time per token is spent on: a pipeline's **stage link** (the boundary's
  receives per step and the transport they cross: NVLink P2P, host memory under
  NCCL_P2P_DISABLE, the network between nodes) and its **bubbles** (the share of the stages' time
  idle: a stage waits while the others run its batch's step, unless micro-batches fill it); a
  TP-only split's exposed AllReduce time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from laddersim.planning.planner import PlanOption, is_dp_attention_row

_NEEDS = re.compile(r"needs ([0-9.]+) GiB per GPU.* has ([0-9.]+) GiB usable")


@dataclass(frozen=True)
class SplitVerdict:
    hardware: str
    tp: int
    pp: int
    nodes: int | None  # per replica (None where nothing fitted to say it)
    gpus_per_replica: int
    meets: bool
    schedule: str | None  # of the cheapest option meeting the target
    batch: int | None
    usd_per_hour: float | None
    reason: str
    ep: int = 1
    dp_attention: bool = False  # ep / tp attention replicas of TP tp, experts over all ep GPUs


def _reason_infeasible(rows: list[dict]) -> str:
    errors = [r["error"] or "" for r in rows]
    memory = next((e for e in errors if e.startswith("memory:")), None)
    if memory is None:
        return f"cannot run: {errors[0]}"
    found = _NEEDS.search(memory)
    return (f"weights do not fit: {found.group(1)} GiB per GPU needed, {found.group(2)} usable" if found
            else "weights do not fit")


def _reason_ok(row: dict) -> str:
    """What the split's time per token goes to (its best row)."""
    step_s = row["tpot_s"]
    if int(row.get("pp") or 1) > 1:
        boundary_us = 1e6 * float(row.get("pp_boundary_step_s") or 0.0)
        link = row.get("pp_boundary_transport") or "?"
        bubble = float(row.get("pipeline_bubble") or 0.0)
        return (f"stage link {link}: {boundary_us:.0f} us of a {step_s * 1e3:.2f} ms step; bubbles {bubble:.0%} "
                f"({int(row.get('pp_microbatches') or 1)} micro-batch(es) in flight)")
    exposed = float(row.get("exposed_comm_s") or 0.0) / float(row["total_s"])
    ep = int(row.get("ep") or 1)
    if is_dp_attention_row(row):
        return (f"data-parallel attention, {ep // int(row['tp'])} replicas of TP {row['tp']}: exposed all-to-all"
                f"{' and AllReduce' if int(row['tp']) > 1 else ''} {exposed:.0%} of the time")
    split = "TP only" if ep == 1 else f"experts placed {ep} ways in the TP group"
    return f"{split}: exposed AllReduce {exposed:.0%} of the time"


def split_verdicts(rows: list[dict], options: list[PlanOption],
                   refused: list[tuple[str, int, int, int, str]] = ()) -> list[SplitVerdict]:
    """One verdict per (profile, TP, PP, EP) among ``rows`` (the plan's simulated rows), the splits
    meeting the target first in the order of ``options`` (ranked), then the others, then the
    ``refused`` splits, (profile, TP, PP, EP, why), not simulated."""
    groups: dict[tuple[str, int, int, int, bool], list[dict]] = {}
    for row in rows:
        key = (row["hardware"], int(row["tp"]), int(row.get("pp") or 1), int(row.get("ep") or 1),
               is_dp_attention_row(row))
        groups.setdefault(key, []).append(row)
    best = {}
    for option in options:
        best.setdefault((option.hardware, option.tp, option.pp, option.ep, option.dp_attention), option)
    verdicts = []
    for (hardware, tp, pp, ep, layout), part in groups.items():
        ok = [r for r in part if r["status"] == "ok"]
        nodes = int(ok[0]["nodes"]) if ok else None
        gpus = ep if layout else tp * pp
        option = best.get((hardware, tp, pp, ep, layout))
        if option is not None:
            row = next(r for r in ok if r["schedule"] == option.schedule and r["batch"] == option.batch)
            verdicts.append(SplitVerdict(hardware, tp, pp, nodes, gpus, True, option.schedule, option.batch,
                                         option.usd_per_hour, _reason_ok(row), ep, layout))
        elif not ok:
            verdicts.append(SplitVerdict(hardware, tp, pp, None, gpus, False, None, None, None,
                                         _reason_infeasible(part), ep, layout))
        else:
            fastest = min(ok, key=lambda r: r["tpot_s"])
            verdicts.append(SplitVerdict(
                hardware, tp, pp, nodes, gpus, False, None, None, None,
                f"misses the target: at most {1 / fastest['tpot_s']:.1f} user tok/s ({fastest['schedule']}, batch "
                f"{fastest['batch']}; {_reason_ok(fastest)})", ep, layout))
    order = {key: i for i, key in enumerate(best)}
    verdicts += [SplitVerdict(hardware, tp, pp, None, tp * pp, False, None, None, None, f"cannot run: {why}", ep)
                 for hardware, tp, pp, ep, why in refused]
    return sorted(verdicts, key=lambda v: (not v.meets, order.get((v.hardware, v.tp, v.pp, v.ep, v.dp_attention), 0),
                                           v.hardware, v.tp, v.pp, v.ep, v.dp_attention))
