"""Capacity planning: the cheapest deployments of a model that meet a serving target.

A configuration is (profile, TP, PP, schedule, batch); ``nodes`` follows from TP, PP and the
profile (``laddersim.hardware.placement``). One replica is ``PP`` stages of one TP group each
serving ``batch`` concurrent users, as serving engines run a pipeline: as many micro-batches in
flight as stages where the batch splits evenly (``gcd(batch, PP)``; one at batch 1). Throughput is the decode phase in
steady state (the prefill excluded), from the simulated time per output token ``tpot_s``:

* per-user tokens/s = 1 / tpot_s; per-token latency = tpot_s;
* aggregate tokens/s = replicas * batch / tpot_s;
* replicas = the fewest that meet an aggregate target (1 without one);
* cost per hour = replicas * TP * PP * price per GPU-hour (a replica smaller than a node pays only for
  its GPUs: the rest of the node serves other replicas); a mixture-of-experts model's
  data-parallel-attention layout (``candidate_layouts``) is one replica of EP GPUs;
* cost per million tokens = cost per hour / (aggregate tokens/s * 3600) * 1e6.

Candidates that do not fit in memory, or whose TP the model or profile does not allow, are left
out. Options are ranked cheapest first: by cost per hour when there is an aggregate target (what
meeting it costs), else by cost per million tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from laddersim.costs.collective_labels import allreduce_by_phase
from laddersim.errors import UserInputError
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload
from laddersim.hardware.placement import place
from laddersim.schedules.stages import split_layers
from laddersim.sweeps.grid import OVERRIDE_COLUMNS
from laddersim.sweeps.points import Point

RANK_KEYS = ("usd_per_hour", "usd_per_million_tokens")


@dataclass(frozen=True)
class Target:
    min_user_tokens_per_s: float | None = None
    min_total_tokens_per_s: float | None = None
    max_token_latency_ms: float | None = None

    def __post_init__(self) -> None:
        given = {k: v for k, v in asdict(self).items() if v is not None}
        if not given:
            raise UserInputError("target: give at least one of --min-user-tokens-per-s, "
                                 "--min-total-tokens-per-s, --max-token-latency-ms")
        for key, value in given.items():
            if not value > 0:
                raise UserInputError(f"target: {key} must be > 0, got {value}")

    @property
    def default_rank_by(self) -> str:
        return "usd_per_hour" if self.min_total_tokens_per_s else "usd_per_million_tokens"


@dataclass(frozen=True)
class PlanOption:
    hardware: str
    schedule: str
    tp: int
    nodes: int
    batch: int
    replicas: int
    gpus: int
    tpot_s: float
    user_tokens_per_s: float
    total_tokens_per_s: float
    usd_per_gpu_hour: float
    usd_per_hour: float
    usd_per_million_tokens: float
    memory_per_gpu_gib: float
    prompt_len: int | None = None  # the workload the option was simulated for
    gen_len: int | None = None
    pp: int = 1  # pipeline stages of the replica (each a TP group)
    pp_microbatches: int = 1  # batches in flight through them
    allreduce: str = ""  # the AllReduce implementation its decode step runs (``named_allreduce``)
    ep: int = 1  # a mixture-of-experts model's expert-parallel ranks in each TP group
    # Data-parallel attention (laddersim.model.dp_attention): ep / tp attention replicas of TP tp,
    # the experts over all ep GPUs; ``batch`` is then every attention replica's sequences together.
    dp_attention: bool = False


def candidate_eps(model: ModelShape, tp: int, allowed: list[int] | None = None) -> list[int]:
    """Expert-parallel degrees of a mixture-of-experts model at ``tp`` (``ModelShape.with_ep``,
    ``MoESpec.check_tp``: a divisor of ``tp`` and of the experts whose ``tp / ep`` split divides
    each expert's width); [1] for a dense model."""
    return [ep for ep, reason in ep_choices(model, tp, allowed) if reason is None]


def ep_choices(model: ModelShape, tp: int, allowed: list[int] | None = None) -> list[tuple[int, str | None]]:
    """Each expert-parallel degree tried at ``tp`` (``allowed``, default the divisors of ``tp``)
    with why it cannot run there (None: it can); [(1, None)] for a dense model."""
    if model.moe is None:
        return [(1, None)]
    out = []
    for ep in allowed or [d for d in range(1, tp + 1) if tp % d == 0]:
        try:
            model.with_ep(ep).check_tp(tp)
        except UserInputError as exc:
            out.append((ep, str(exc)))
            continue
        out.append((ep, None))
    return out


def candidate_layouts(model: ModelShape, profile: HardwareProfile, tps: list[int] | None = None,
                      eps: list[int] | None = None) -> list[tuple[int, int]]:
    """(attention TP, EP) of the data-parallel-attention layouts of a mixture-of-experts model on
    one node of ``profile`` (the all-to-all is priced within one): two or more replicas of an
    allowed TP whose ``ep`` divides the experts (and is among ``eps`` where given); [] for a
    dense model."""
    if model.moe is None:
        return []
    per_node = profile.node.gpus_per_node
    return [(tp, ep) for tp in candidate_tps(model, profile, tps, 1) for ep in range(2 * tp, per_node + 1, tp)
            if model.moe.n_experts % ep == 0 and (not eps or ep in eps)]


def candidate_tps(model: ModelShape, profile: HardwareProfile, allowed: list[int] | None = None,
                  max_nodes: int | None = None) -> list[int]:
    """TP degrees the model can be sharded to and the profile can host (whole nodes across nodes,
    none beyond one node without a network), on at most ``max_nodes`` nodes."""
    out = []
    for tp in allowed or range(1, model.n_heads + 1):
        try:
            model.check_tp(tp)
            nodes = profile.nodes_for(tp)
        except UserInputError:
            continue
        if max_nodes is None or nodes <= max_nodes:
            out.append(tp)
    return out


def candidate_splits(model: ModelShape, profile: HardwareProfile, tps: list[int] | None = None,
                     pps: list[int] | None = None, max_nodes: int | None = None) -> list[tuple[int, int]]:
    """(TP, PP) splits the model and profile allow (each stage a TP group placed on the profile's
    nodes: ``laddersim.hardware.placement``), on at most ``max_nodes`` nodes per replica."""
    out = []
    for tp in candidate_tps(model, profile, tps, None):
        for pp in pps or [1]:
            try:
                split_layers(model.n_layers, pp)
                nodes = place(profile, tp, pp).nodes
            except UserInputError:
                continue
            if max_nodes is None or nodes <= max_nodes:
                out.append((tp, pp))
    return out


def candidate_points(model: str, model_shape: ModelShape, profiles: dict[str, tuple[str, HardwareProfile]],
                     schedules: list[str], batches: list[int], tps: list[int] | None, prompt_len: int,
                     gen_len: int, dtype: str, kv_cache: str, max_nodes: int | None = None,
                     pps: list[int] | None = None, eps: list[int] | None = None) -> list[Point]:
    """Every (profile, TP, PP, EP, schedule, batch) to simulate; ``profiles``: name -> (load ref,
    profile); ``eps``: the expert-parallel degrees a mixture-of-experts model may take (default all
    ``candidate_eps``). A mixture-of-experts model's data-parallel-attention layouts of one node
    (``candidate_layouts``, without a pipeline: where ``pps`` allows 1) join them, each attention
    replica serving ``batch`` sequences."""
    no_overrides = tuple((c, None) for c in OVERRIDE_COLUMNS)
    if eps and model_shape.moe is None and set(eps) != {1}:
        raise UserInputError(f"ep: {' '.join(map(str, eps))} places experts, and {model_shape.name} is dense; allowed: 1")
    points = []
    for name, (ref, profile) in profiles.items():
        for tp, pp in candidate_splits(model_shape, profile, tps, pps, max_nodes):
            for ep in candidate_eps(model_shape, tp, eps):
                for schedule in schedules:
                    for batch in batches:
                        points.append(Point(model, name, tp, batch, prompt_len, gen_len, schedule, dtype, kv_cache,
                                            no_overrides, model, ref, pp=pp, pp_microbatches=math.gcd(batch, pp),
                                            ep=ep))
        for tp, ep in candidate_layouts(model_shape, profile, tps, eps) if not pps or 1 in pps else ():
            for schedule in schedules:
                for batch in batches:
                    points.append(Point(model, name, tp, batch * (ep // tp), prompt_len, gen_len, schedule, dtype,
                                        kv_cache, no_overrides, model, ref, ep=ep, dp_attention=True))
    if not points:
        raise UserInputError(no_candidates_message(model_shape, profiles, tps, max_nodes))
    return points


def no_candidates_message(model_shape: ModelShape, profiles: dict[str, tuple[str, HardwareProfile]],
                          tps: list[int] | None, max_nodes: int | None) -> str:
    """Why the user's own options (--tp, --max-nodes, --profiles) leave no (profile, TP) to
    simulate, as one line naming them and the TP degrees that would do."""
    nodes_flag = f" with --max-nodes {max_nodes}" if max_nodes is not None else ""
    possible = sorted({tp for _, profile in profiles.values()
                       for tp in candidate_tps(model_shape, profile, None, max_nodes)})
    reasons = []
    for tp in tps or []:
        nodes = []
        for _, profile in profiles.values():
            try:
                model_shape.check_tp(tp)
                nodes.append(profile.nodes_for(tp))
            except UserInputError:
                continue
        reasons.append(f"tp {tp} spans at least {min(nodes)} nodes" if nodes
                       else f"tp {tp} runs on none of the candidate profiles")
    given = f"--tp {' '.join(map(str, tps))}" if tps else "the TP degrees the model allows"
    why = f" ({'; '.join(reasons)})" if reasons else ""
    return (f"tp: no configuration to simulate: {given}{nodes_flag}{why}; "
            f"allowed --tp{nodes_flag} on the candidate profiles: {', '.join(map(str, possible)) or 'none'}")


def fewest_replicas(target_tokens_per_s: float | None, replica_tokens_per_s: float) -> int:
    if not target_tokens_per_s:
        return 1
    replicas = max(1, math.ceil(target_tokens_per_s / replica_tokens_per_s))
    # Guard the division's rounding: the fewest R with R * replica >= target.
    while replicas > 1 and (replicas - 1) * replica_tokens_per_s >= target_tokens_per_s:
        replicas -= 1
    while replicas * replica_tokens_per_s < target_tokens_per_s:
        replicas += 1
    return replicas


def is_dp_attention_row(row: dict) -> bool:
    """Did the simulated ``row`` run the data-parallel-attention layout? (True only: a row of a
    table mixing layouts and splits holds NaN where it did not.)"""
    return row.get("dp_attention") in (True,)


def option_for(row: dict, usd_per_gpu_hour: float, target: Target) -> PlanOption | None:
    """The deployment a simulated row gives, or None if it misses a per-user target."""
    if row["status"] != "ok":
        return None
    tpot_s = row["tpot_s"]
    user = 1.0 / tpot_s
    if target.min_user_tokens_per_s and user < target.min_user_tokens_per_s:
        return None
    if target.max_token_latency_ms and tpot_s * 1e3 > target.max_token_latency_ms:
        return None
    replica_tokens_per_s = row["batch"] / tpot_s
    replicas = fewest_replicas(target.min_total_tokens_per_s, replica_tokens_per_s)
    total = replicas * replica_tokens_per_s
    pp, microbatches = int(row.get("pp") or 1), int(row.get("pp_microbatches") or 1)
    layout = is_dp_attention_row(row)
    gpus = replicas * (int(row["ep"]) if layout else row["tp"] * pp)
    usd_per_hour = gpus * usd_per_gpu_hour
    return PlanOption(
        hardware=row["hardware"], schedule=row["schedule"], tp=row["tp"], nodes=int(row["nodes"]),
        batch=row["batch"], replicas=replicas, gpus=gpus, tpot_s=tpot_s, user_tokens_per_s=user,
        total_tokens_per_s=total, usd_per_gpu_hour=usd_per_gpu_hour, usd_per_hour=usd_per_hour,
        usd_per_million_tokens=usd_per_hour / (total * 3600.0) * 1e6,
        memory_per_gpu_gib=row["memory_per_gpu_gib"], prompt_len=_int_or_none(row.get("prompt_len")),
        gen_len=_int_or_none(row.get("gen_len")), pp=pp, pp_microbatches=microbatches, ep=int(row.get("ep") or 1),
        dp_attention=layout,
    )


def named_allreduce(options: list[PlanOption], model_shape: ModelShape,
                    profiles: dict[str, tuple[str, HardwareProfile]], dtype: str, kv_cache: str) -> list[PlanOption]:
    """``options`` with ``allreduce`` set: the implementation each one's decode AllReduce runs on
    its profile and TP (``laddersim.costs.collective_labels.allreduce_by_phase``, as ``simulate``
    names it; the plan's steady state is decode)."""
    out = []
    for o in options:
        work = Workload(batch=o.batch, prompt_len=o.prompt_len or 1, gen_len=o.gen_len or 1, dtype=dtype,
                        kv_cache=kv_cache)
        named = allreduce_by_phase(model_shape, profiles[o.hardware][1], work, o.tp)["decode"]
        out.append(replace(o, allreduce=named))
    return out


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


def rank_options(rows: list[dict], prices_by_hardware: dict[str, float], target: Target,
                 rank_by: str | None = None) -> list[PlanOption]:
    """Options meeting the target, cheapest first (ties: the other cost, then fewer GPUs, names)."""
    rank_by = rank_by or target.default_rank_by
    if rank_by not in RANK_KEYS:
        raise UserInputError(f"rank-by: unknown '{rank_by}'; allowed: {', '.join(RANK_KEYS)}")
    other = RANK_KEYS[1 - RANK_KEYS.index(rank_by)]
    options = [o for r in rows if (o := option_for(r, prices_by_hardware[r["hardware"]], target))]
    return sorted(options, key=lambda o: (getattr(o, rank_by), getattr(o, other), o.gpus, o.hardware,
                                          o.schedule, o.tp, o.pp, o.batch, o.ep, o.dp_attention))
