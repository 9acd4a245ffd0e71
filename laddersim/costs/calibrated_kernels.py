"""Decode op times from a traced stack's kernel calibration (a framework file written by
``laddersim calibrate kernels``: ``laddersim.model.kernel_calibration``), so such a file prices every
command, not only ``laddersim kernels``.

The op program keeps its op kinds (the schedules overlap them with the collectives); what a layer
costs per kernel class comes from the trace. For each class, the traced regime's time on this shard
(its kernels' floors plus the bytes it streams at the bandwidth the trace achieved) is shared out
over the standard layer's op kinds of that class in proportion to what the cost model charges
them (every op kind of the class scaled alike, so another schedule's layer, e.g. parallel's fused
QKV + gate/up GEMM, costs what the cost model says it saves: ``schedule_layer``); a class
the trace ran but the cost model has no op of (e.g. a cuDNN reduction classed ``other``) goes to
the attention, and a class the cost model charges but the trace did not run costs nothing.
Attention is priced per KV length (it streams the expanded K/V it attends), and so is any class
the trace drives by K/V bytes (each decode step at its own cache length under a dynamic cache). Ops outside the layers
(embedding, final norm, LM head, sampling) and the collectives keep the cost model's prices.
"""

from __future__ import annotations

import collections

import numpy as np

from laddersim.costs.gemm import memory_bound_time_s
from laddersim.costs.pass_shapes import Phase, first_decode_positions, linear_shapes
from laddersim.model.kernel_calibration import driver_bytes

LAYER_KINDS = ("attn_norm", "qkv", "rope", "attention", "o_proj", "residual_add", "mlp_norm", "gate_up", "act",
               "down", "norm", "qkv_gate_up", "partial_add")
LAYER_LINEARS = ("qkv", "o_proj", "gate_up", "down")  # a standard layer's weights


def layer_bytes(model, tp: int, batch: int, cache_len: float, dtype_bytes: int) -> tuple[float, float]:
    """(weights, expanded K/V) bytes one layer streams on one rank: the linears' weights, and K and
    V of ``cache_len`` positions expanded to every query head of ``batch`` sequences."""
    shapes = linear_shapes(model, tp, Phase("decode", batch, 1))
    weights = sum(n * k for kind, (_, n, k, _) in shapes.items() if kind in LAYER_LINEARS) * dtype_bytes
    return float(weights), float(batch * cache_len * 2 * model.heads_per_rank(tp) * model.head_dim * dtype_bytes)


def class_split_s(seconds: float, classes: dict, shape, gpu) -> dict[str, float]:
    """An op kind's seconds by kernel class: a split linear's reduce kernel apart from its GEMM."""
    main = [c for c in classes if c != "splitk_reduce"]
    out: dict[str, float] = {}
    if "splitk_reduce" in classes and shape is not None:
        m, n = shape[0], shape[1]
        reduce_s = float(memory_bound_time_s(gpu, 2 * m * n * 4))
        out["splitk_reduce"] = reduce_s
        seconds -= reduce_s
    if main:
        out[main[0]] = seconds
    return out


def class_seconds(calib, cost, weights_bytes: float, kv_bytes: float, gpu) -> float:
    """A traced class's seconds on this shard: its kernels' floors (as traced:
    ``ClassCost.floors_us``) plus its driver's bytes at the bandwidth the trace achieved; a
    ``fixed`` class (no bandwidth) its traced time as it is. On a ``gpu`` fitted to other runs
    (``GpuSpec.table_rates``) the floors and the bandwidth follow the fitted floor and memory rate."""
    if cost.bandwidth_gbps is None:
        return cost.us * 1e-6
    moved = driver_bytes(cost.driver, weights_bytes=weights_bytes, kv_bytes=kv_bytes)
    return (cost.floors_us(calib.floor_us) * 1e-6 * gpu.floor_over_tables()
            + moved / (cost.bandwidth_gbps * 1e9 * gpu.memory_rate_over_tables()))


def kind_split(times: dict[str, float], classes: dict, shapes: dict, gpu) -> dict[str, dict[str, float]]:
    """The cost model's seconds of each layer op kind (attention apart) by kernel class."""
    return {kind: class_split_s(times[kind], classes.get(kind, {}), shapes.get(kind), gpu)
            for kind in LAYER_KINDS if kind in times and kind != "attention"}


def layer_classes(split: dict, classes: dict, layer_counts: dict[str, int]) -> tuple[collections.Counter,
                                                                                     collections.Counter]:
    """(the cost model's seconds, its kernels) per class of a layer of ``layer_counts`` ops
    (attention apart: it is the same in every schedule)."""
    seconds: collections.Counter = collections.Counter()
    kernels: collections.Counter = collections.Counter()
    for kind, parts in split.items():
        for cls, part_s in parts.items():
            seconds[cls] += part_s * layer_counts.get(kind, 0)
        for cls, count in classes.get(kind, {}).items():
            kernels[cls] += count * layer_counts.get(kind, 0)
    return seconds, kernels


def schedule_layer(calib, model, hw, work, tp: int, phase, times: dict[str, float], classes: dict, shapes: dict,
                   standard_counts: dict[str, int], counts: dict[str, int]) -> dict[str, tuple[float, float]]:
    """``{class: (kernels, seconds)}`` of one decode layer of a schedule (its op kinds
    ``counts``; ``standard_counts``: the standard layer's, the one the trace ran) on this shard.

    Each traced class is priced on this shard (``class_seconds``); a schedule whose layer runs other
    op kinds (parallel: one fused QKV + gate/up GEMM, one norm) changes a class by what the cost
    model charges its layer against the standard one: its kernels by the difference in count, its
    time by the ratio (the simulator scales every op kind of the class alike:
    ``calibrated_decode``). The ``collective`` class is left out (the program's, priced apart)."""
    regime = calib.regime_for(phase.batch)
    weights, kv = layer_bytes(model, tp, phase.batch, first_decode_positions(work), work.dtype_bytes)
    split = kind_split(times, classes, shapes, hw.gpu)
    std_s, std_n = layer_classes(split, classes, standard_counts)
    now_s, now_n = layer_classes(split, classes, counts)
    out = {}
    for cls, cost in regime.classes.items():
        if cls == "collective" or not cost.kernels:
            continue
        seconds = class_seconds(calib, cost, weights, kv, hw.gpu)
        if std_s.get(cls, 0.0) > 0:
            seconds *= now_s.get(cls, 0.0) / std_s[cls]
        out[cls] = (max(cost.kernels + now_n.get(cls, 0) - std_n.get(cls, 0), 0.0), seconds)
    return out


def calibrated_decode(calib, model, hw, work, tp: int, phase, times: dict[str, float], classes: dict,
                      shapes: dict, layer_counts: dict[str, int], kv_lens: np.ndarray) -> dict[str, np.ndarray]:
    """``{op kind: seconds over kv_lens}`` of a decode pass priced from ``calib`` (see the module
    docstring). ``times``: the cost model's seconds per kind; ``classes``: its kernels per kind and
    class (laddersim.costs.kernel_counts.op_kernels); ``layer_counts``: each kind's ops in a layer."""
    regime = calib.regime_for(phase.batch)
    # K/V positions each step streams: the whole static cache, or each step's own length
    per_len = np.full(kv_lens.shape, float(work.max_seq_len)) if work.kv_cache == "static" \
        else np.asarray(kv_lens, dtype=float)
    weights, kv_per_position = layer_bytes(model, tp, phase.batch, 1.0, work.dtype_bytes)
    kv_each = per_len * kv_per_position  # the expanded K/V bytes are linear in the cached positions
    split = kind_split(times, classes, shapes, hw.gpu)
    base_by_class, _ = layer_classes(split, classes, layer_counts)

    def class_s(cls: str, kv_bytes):
        return class_seconds(calib, regime.classes[cls], weights, kv_bytes, hw.gpu)

    out = {kind: np.full(kv_lens.shape, value) for kind, value in times.items()}
    leftover = 0.0
    for cls in regime.classes:
        if cls in ("attention", "collective") or not regime.classes[cls].kernels:
            continue
        target = class_s(cls, kv_each)  # per step: a K/V-driven class follows the cache
        if base_by_class.get(cls, 0.0) <= 0:
            leftover += target  # a class the cost model has no op of: with the attention
            continue
        scale = target / base_by_class[cls]
        for kind, parts in split.items():
            if cls in parts:
                out[kind] = out[kind] + (parts[cls] * (scale - 1.0))
    for cls in set(base_by_class) - set(regime.classes):  # charged by the model, not run in the trace
        for kind, parts in split.items():
            if cls in parts:
                out[kind] = out[kind] - parts[cls]
    attention = np.broadcast_to(class_s("attention", kv_each), kv_lens.shape) if "attention" in regime.classes \
        else np.zeros(kv_lens.shape)
    out["attention"] = attention + leftover / max(layer_counts.get("attention", 1), 1)
    return out
