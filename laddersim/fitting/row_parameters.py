"""What ``laddersim fit`` fits, and how each fitted number reaches the profile's costs.

Shared by every profile of the measured machine (P2P on and off are the same GPUs and software):

* ``device_speed_scale``: the machine's device costs at one common factor of the profile's rates:
  memory streaming (``gpu.gemm_memory_efficiency``, ``gpu.elementwise_memory_efficiency``), L2
  reads, tensor-core compute, kernel floors and the collectives (a lower clock or power limit,
  another binning of the same parts). A uniformly slower or faster machine is the fit's null
  hypothesis (it keeps the profile's speedups, as a uniformly scaled machine does): every row
  moves with this one number, so its prior (as a microbenchmarked number's) hardly holds it where
  the rows agree, and holds it where they barely tell it from a per-step constant (a small model
  whose steps are mostly kernel floors);
* relative to it, each held by a prior: ``compute_efficiency_scale``, how fast the tensor cores
  run beside the memory (``gpu.gemm_compute_efficiency``, ``gpu.attention_compute_efficiency``,
  ``gpu.sustained_tflops``: a prefill's and a large batch's GEMMs); ``kernel_launch_us``, every
  kernel's floor (``gpu.kernel_launch_us``); and, when the rows hold batch 1 and larger batches,
  ``single_token_kernel_floor_us`` (a compiled batch-1 step runs other, fused kernels than an
  M > 1 step). A fitted floor is the floor at the profile's speed: the profile gets it over
  ``device_speed_scale``;
* ``step_overhead_us``: the host's fixed cost of a forward pass (not a device cost).

The memory rate has no scale of its own: a decode step is mostly memory-bound kernels and
AllReduces, and ``standard`` rows cannot tell a faster memory from a slower AllReduce (both change
a step's time with TP); on real runs a fit that may trade one for the other predicts the held-out
schedules' speedups worse (held-out speedup error, median / worst, with a memory scale beside the
common speed against without: Llama-3.1-70B's 20 standard rows 1.63 / 18.97 pp against 1.34 /
17.89; the 8B table's 15 rows 1.01 / 8.40 against 0.91 / 7.26; the flash table's 42 rows 1.99 /
18.27 against 1.59 / 22.31: ``laddersim fit`` on laddersim/data/validation/ladder_{70b,8b}_tp_sweep.csv,
and ladder_flash_p2p_sweep.csv with ``--framework gpt-fast-flash``).

The GPU's numbers reach what a measured table prices too: the fitted profile keeps the rates its
tables ran at (``gpu.table_rates``) and a table's time follows the fitted ones (GEMM tables:
``laddersim.costs.gemm_tables``; a traced stack's kernel classes:
``laddersim.costs.calibrated_kernels``); the collectives follow through the profile's ``what_if``
scales, which every AllReduce table and model it prices with reads.

Per profile, with rows that see the AllReduce apart from the compute (``upper_bound``, no
communication, or ``ladder``, overlapping it, beside ``standard``): its floor and bandwidth
relative to the common speed (``allreduce_latency_scale``, ``allreduce_bandwidth_scale``). A
collective model built from mechanisms (no measured table, e.g. ``h100-sxm-p2p-off``) gets a
floor and a bandwidth per group size instead, written as ``collectives.intra_node_fits``, when
rows of a measured collective on the same machine pin the per-step constant. From ``standard``
rows alone the collective moves only with the common speed. A measured one: there the AllReduce
and the kernels around it change together with TP, and on real runs a fit trades one for the
other (Llama-3.1-8B's 15 standard rows: AllReduce floor +26%, memory efficiency +11%, and the
held-out schedules' speedups 3.5 pp median error instead of 1.7 pp with the collective held).
One built from mechanisms: standard rows pin what the collective adds to a step, not how much of
it an overlapping schedule hides, and a fit that puts the whole gap into it predicts the overlap
the rows never saw (Llama-3.1-70B's 20 standard rows, P2P off fitted per group size: held-out
speedups 1.90 / 22.98 pp median / worst against the unfitted profile's 2.15 / 12.26; held,
1.59 / 12.26).

Only when the fitted rows include a schedule that overlaps AllReduce with compute (``ladder``,
``hybrid:N``; ``laddersim fit --with-ladder``), shared by every profile: the interference
fractions ``interference.compute_slowdown`` and ``interference.comm_slowdown`` (on the part of
the collective the base profile names), replacing any per-size curve: "I measured ladder on one
setting; what will it give on the others?".

The numbers the profile already has are held by a prior: each costs, per sigma of log-scale, as
much as one row off by the loss scale, so rows that cannot tell two parameters apart leave the
microbenchmarked one where it was. A collective model built from mechanisms (no measured table)
gets a weak prior.
"""

from __future__ import annotations

from dataclasses import dataclass

from laddersim.costs.collectives import alpha_beta_time_s
from laddersim.hardware.comm_specs import ProtocolTerm, TierFit
from laddersim.hardware.compute_specs import TableRates
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.sourced import Sourced

# Per-step and per-kernel constants of the framework (step overhead, single-token kernel floor):
# held near the base profile's value, one sigma = a factor e. A fitted 1.8 ms step overhead for a
# CUDA-graph decode step is a missing mechanism, not a result: the rows must pay heavily for it.
CONSTANT_PRIOR_SIGMA = 1.0
PRIOR_SIGMA = 0.1  # microbenchmarked scales and the GPU's kernel floor: one sigma = 10%
WEAK_PRIOR_SIGMA = 0.5  # scales of a collective model built from mechanisms, not a measured table


@dataclass(frozen=True)
class Param:
    """One fitted number: its name, which profile it belongs to, start value, bounds, typical step."""

    name: str
    p2p: str | None  # None: shared by every profile
    start: float
    lower: float
    upper: float
    scale: float
    # Scales of a microbenchmarked number: how far (log scale, one sigma) the fit may pull it
    # before that costs as much as one measured row off by the loss scale. None: no prior.
    prior_sigma: float | None = None

    @property
    def label(self) -> str:
        """The name as reported: ``name[p2p=off]`` for a parameter of one P2P setting's profile."""
        return self.name + (f"[p2p={self.p2p}]" if self.p2p else "")


def parameters(base: dict[str, HardwareProfile], settings: list[str], batches: set[int],
               group_sizes: dict[str, set[int]], overlapped: bool, collectives_seen: bool) -> list[Param]:
    """The fitted numbers for rows of the P2P ``settings`` (``base``: their profiles) at these
    batches and group sizes; ``overlapped``: rows overlap AllReduce with compute;
    ``collectives_seen``: rows see the AllReduce apart from the compute (see the module docstring)."""
    first = base[settings[0]]
    gpu = first.gpu
    step = first.framework.step_overhead_us.value
    params = [
        Param("step_overhead_us", None, step, step * 1e-3 if step > 0 else 0.0, max(20000.0, step), 50.0,
              CONSTANT_PRIOR_SIGMA if step > 0 else None),
        # A memory efficiency is at most 1 (the datasheet's bandwidth): the speed's upper bound.
        Param("device_speed_scale", None, 1.0, 0.2,
              1.0 / max(gpu.gemm_memory_efficiency.value, gpu.elementwise_memory_efficiency.value), 0.05,
              PRIOR_SIGMA),
        # Relative to the common speed, so no peak bounds it on its own: its prior holds it.
        Param("compute_efficiency_scale", None, 1.0, 0.3, 5.0, 0.05, PRIOR_SIGMA),
    ]
    launch = gpu.kernel_launch_us.value
    if launch > 0:
        params.append(Param("kernel_launch_us", None, launch, launch * 0.1, launch * 10.0, 0.5, PRIOR_SIGMA))
    if 1 in batches and len(batches) > 1:
        # Batch-1 and larger-batch steps together tell the single-token kernel floor from the rest.
        floor = first.framework.single_token_kernel_floor_us
        start = floor.value if floor else launch
        params.append(Param("single_token_kernel_floor_us", None, start, start * 1e-3 if start > 0 else 0.0,
                            max(4.0 * launch, start), 0.5, CONSTANT_PRIOR_SIGMA if start > 0 else None))
    if overlapped:
        # Rows that overlap AllReduce with compute: the two interference fractions (no prior, the
        # shipped ones are estimates), one for the machine.
        interference = first.interference
        params += [Param("compute_slowdown", None, interference.compute_slowdown.value, 0.0, 1.0, 0.02),
                   Param("comm_slowdown", None, interference.comm_slowdown.value, 0.0, 10.0, 0.2)]
    if not collectives_seen:
        # Standard rows alone: the collective moves with the common speed only (module docstring).
        return params
    measured = {p: any(t.use == "model" for t in base[p].collectives.tables) for p in settings}
    for p in settings:
        # A collective model read from measured tables is held closer than one built from
        # mechanisms, and keeps its measured shape across group sizes. A mechanism-built one gets
        # a floor and a bandwidth per group size (how a transport's cost changes with the group,
        # e.g. once a ring crosses CPU sockets, is what it does not know) when rows of a measured
        # collective pin the per-step constant: otherwise floors and that constant trade off
        # one for one.
        sigma = PRIOR_SIGMA if measured[p] else WEAK_PRIOR_SIGMA
        if measured[p] or not any(measured.values()):
            suffixes = [""]
        else:
            suffixes = [f"@{tp}" for tp in sorted(group_sizes[p]) if tp > 1 and base[p].nodes_for(tp) == 1]
        for suffix in suffixes:
            params += [Param("allreduce_latency_scale" + suffix, p, 1.0, 0.05, 100.0, 0.2, sigma),
                       Param("allreduce_bandwidth_scale" + suffix, p, 1.0, 0.1, 10.0, 0.2, sigma)]
    return params


def apply(profile: HardwareProfile, values: dict[str, float], source: str) -> HardwareProfile:
    """``profile`` with the fitted values set (names as in ``Param.name``; a name absent: as the
    profile has it)."""
    gpu, fw = profile.gpu, profile.framework
    speed = values.get("device_speed_scale", 1.0)

    def rate(number: Sourced | None, relative: str | None = None) -> Sourced | None:
        """A device rate at the common speed, times its own relative scale where fitted."""
        factor = speed * values.get(relative, 1.0)
        return number if number is None or factor == 1.0 else Sourced(value=number.value * factor, source=source)

    def floor(number: Sourced | None, name: str) -> Sourced | None:
        """A device floor (us): the fitted one, or the profile's, over the common speed."""
        value = values.get(name, number.value if number is not None else None)
        return number if value is None or (name not in values and speed == 1.0) else Sourced(
            value=value / speed, source=source)

    gpu_update = {
        "gemm_memory_efficiency": rate(gpu.gemm_memory_efficiency),
        "elementwise_memory_efficiency": rate(gpu.elementwise_memory_efficiency),
        "gemm_compute_efficiency": rate(gpu.gemm_compute_efficiency, "compute_efficiency_scale"),
        "attention_compute_efficiency": rate(gpu.attention_compute_efficiency, "compute_efficiency_scale"),
        "sustained_tflops": rate(gpu.sustained_tflops, "compute_efficiency_scale"),
        "l2_bandwidth_gb_per_s": rate(gpu.l2_bandwidth_gb_per_s),
        "kernel_launch_us": floor(gpu.kernel_launch_us, "kernel_launch_us"),
        # The rates the measured tables ran at (a profile fitted before keeps its tables' own).
        "table_rates": gpu.table_rates or TableRates(
            gemm_memory_efficiency=gpu.gemm_memory_efficiency.value,
            gemm_compute_efficiency=gpu.gemm_compute_efficiency.value,
            kernel_launch_us=gpu.kernel_launch_us.value, source=f"{profile.name} before `laddersim fit`"),
    }
    fw_update = {"single_token_kernel_floor_us": floor(fw.single_token_kernel_floor_us,
                                                       "single_token_kernel_floor_us")}
    if "step_overhead_us" in values:
        fw_update["step_overhead_us"] = Sourced(value=values["step_overhead_us"], source=source)
    interference = profile.interference
    if "compute_slowdown" in values:
        interference = interference.model_copy(update={  # the channel rule, if any, is kept
            "compute_slowdown": Sourced(value=values["compute_slowdown"], source=source),
            "comm_slowdown": Sourced(value=values["comm_slowdown"], source=source),
            "by_size": []})
    w = profile.what_if
    what_if = w.model_copy(update={  # the collectives at the common speed, then their own scales
        "intra_latency_scale": w.intra_latency_scale / speed * values.get("allreduce_latency_scale", 1.0),
        "intra_bandwidth_scale": w.intra_bandwidth_scale * speed * values.get("allreduce_bandwidth_scale", 1.0),
        "inter_latency_scale": w.inter_latency_scale / speed,
        "inter_bandwidth_scale": w.inter_bandwidth_scale * speed,
        "source": source})
    per_group = {int(name.split("@")[1]): v for name, v in values.items()
                 if name.startswith("allreduce_latency_scale@")}
    collectives = profile.collectives
    if per_group:
        fits = {f.gpus: f for f in collectives.intra_node_fits}
        for gpus, scale in per_group.items():
            fits[gpus] = _scaled_fit(profile, gpus, scale, values[f"allreduce_bandwidth_scale@{gpus}"], source)
        collectives = collectives.model_copy(update={"intra_node_fits": [fits[g] for g in sorted(fits)]})
    return profile.model_copy(update={"gpu": gpu.model_copy(update=gpu_update),
                                      "framework": fw.model_copy(update=fw_update), "what_if": what_if,
                                      "collectives": collectives, "interference": interference})


def _scaled_fit(profile: HardwareProfile, gpus: int, scale: float, bw_scale: float, source: str) -> TierFit:
    """The profile's intra-node AllReduce curve for ``gpus`` ranks, latency and bandwidth scaled."""
    fit = profile.intra_node_fit(gpus)
    if fit is None:
        tier = profile.collectives.intra_node
        latency_us = float(alpha_beta_time_s(tier, gpus, 0.0)) * 1e6
        terms = [ProtocolTerm(protocol=tier.algorithm, latency_us=latency_us,
                              bus_bandwidth_gb_per_s=tier.bus_bandwidth_gb_per_s.value)]
    else:
        terms = list(fit.terms)
    return TierFit(gpus=gpus, source=source, terms=[
        t.model_copy(update={"latency_us": t.latency_us * scale,
                             "bus_bandwidth_gb_per_s": t.bus_bandwidth_gb_per_s * bw_scale})
        for t in terms])
