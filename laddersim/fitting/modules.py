"""``calibrate fit``: the framework's per-op cost as the model's own modules pay it.

The ``overhead`` benchmark times chains of tiny ops (64 elements) and the engine charges that cost
for every framework op the traced step dispatches (``laddersim.costs.host_overhead``). In the
model's own modules the ops cost more: larger tensors, the cache writes, the allocator and the
caches as a step leaves them. Closed loops on two shared cores (4-layer, width-512 model,
2026-11-24) timed the modules at 0.6-0.7 ms each at batch 1 where the op program priced them at
0.45, and 1.4-1.9 ms at batch 16 against 1.0; an upper-bound step, which has nothing else to hide
that in, came out 1-1.5 ms short in every run. The AllReduce tables are consistent with the modules
as measured, not as priced (``allreduce_bench``: the modules with the AllReduce, less the modules
alone), so a priced module that is short is a step that is short.

Where the run measured the model's modules (the ``skew`` benchmark's longest stretch: every rank's
mean time of that many modules in a row, cycled over the layers as a step meets them), the
per-compute-op cost is solved so that the op program prices a module at that time: the modules'
kinds (``ATTENTION_KINDS`` + ``MLP_KINDS``, what ``calibration/decode_modules.decode_modules``
runs) are linear in it, so two evaluations of the engine's op costs solve it exactly. The chains'
figure stays in the source.
"""

from __future__ import annotations

import numpy as np

from laddersim.fitting.run_context import read_frame
from laddersim.costs.op_costs import Phase, op_times_s
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.sourced import Sourced
from laddersim.model.shape import load_model_shape
from laddersim.model.workload import Workload

# What one module of calibration/decode_modules.decode_modules runs, as op kinds.
ATTENTION_KINDS = ("attn_norm", "qkv", "rope", "attention", "o_proj")
MLP_KINDS = ("mlp_norm", "gate_up", "act", "down")
MODULE_CACHE_LEN = 128  # decode_modules' static cache (2 x DECODE_POS), read in full
MODULE_POSITION = 64  # the position it decodes


def module_seconds(profile: HardwareProfile, model, tp: int, batch: int, dtype: str, modules: int) -> float:
    """The op program's mean seconds per module over ``modules`` of them in a step's order
    (attention, MLP, attention, ...)."""
    work = Workload(batch=batch, prompt_len=MODULE_POSITION, gen_len=MODULE_CACHE_LEN - MODULE_POSITION,
                    dtype=dtype, kv_cache="static", kv_reads="repeat_interleave")
    times = op_times_s(model, profile, work, tp, Phase("decode", batch, 1), np.array([MODULE_POSITION + 1.0]))
    attention = sum(float(times[k][0]) for k in ATTENTION_KINDS)
    mlp = sum(float(times[k][0]) for k in MLP_KINDS)
    n_attention = (modules + 1) // 2
    return (n_attention * attention + (modules - n_attention) * mlp) / modules


def module_anchored(profile: HardwareProfile, run_dir: str) -> tuple[HardwareProfile, str | None]:
    """``profile`` with ``host_overhead.compute_op_us`` solved from the measured modules, and a
    summary line; unchanged (and None) without a host section or a ``skew`` measurement."""
    host = profile.host_overhead
    rows = read_frame(run_dir, "skew")
    if host is None or rows.empty:
        return profile, None
    row = rows.loc[rows["modules"].idxmax()]
    model = load_model_shape(str(row["model"]))
    tp, batch, modules, dtype = int(row["group_size"]), int(row["batch"]), int(row["modules"]), str(row["dtype"])
    target_s = float(row["stretch_us"]) / modules * 1e-6

    def priced(op_us: float) -> float:
        spec = host.model_copy(update={"compute_op_us": Sourced(value=op_us, source="trial")})
        return module_seconds(profile.model_copy(update={"host_overhead": spec}), model, tp, batch, dtype, modules)

    chains_us = host.compute_op_us.value
    at_chains, slope = priced(chains_us), priced(chains_us + 1.0) - priced(chains_us)
    if slope <= 0:
        return profile, None
    op_us = max(chains_us + (target_s - at_chains) / slope, 0.0)
    source = (f"fit: calibration run {run_dir} measurements/skew.csv: the per-op cost at which the op program "
              f"prices a module of {model.name} (tp {tp}, batch {batch}) at its measured {target_s * 1e6:.0f} us "
              f"(every rank's mean over {modules} modules in a row, {int(row['reps'])} repetitions; "
              f"laddersim/fitting/modules.py); tiny-op chains: {host.compute_op_us.source}")
    anchored = host.model_copy(update={"compute_op_us": Sourced(value=op_us, source=source)})
    line = (f"modules measured {target_s * 1e6:.0f} us each, priced {at_chains * 1e6:.0f} us at the chains' "
            f"{chains_us:.2f} us per op: {op_us:.2f} us per compute op")
    return profile.model_copy(update={"host_overhead": anchored}), line
