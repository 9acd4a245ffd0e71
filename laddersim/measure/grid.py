"""Which points a calibration run measures, as plain dicts of key columns (see ``schema``).

The grid depends only on the request and the world's shape, so every rank builds the same list.
GEMM shapes of a model are the ones laddersim's op program costs (laddersim.costs.op_costs):
QKV, O, gate/up, down per layer and the vocab-parallel LM head, with m = batch (decode) or
batch * prompt_len (prefill), sharded by TP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from laddersim.measure.options import DTYPE_BYTES, RunOptions
from laddersim.errors import UserInputError
from laddersim.model.shape import load_model_shape

KIB, MIB = 1024, 1024**2


@dataclass(frozen=True)
class World:
    world_size: int
    ranks_per_node: int
    device: str  # "cpu" | "cuda"

    @property
    def nodes(self) -> int:
        return math.ceil(self.world_size / self.ranks_per_node)

    def nodes_of(self, group_size: int) -> int:
        """Nodes spanned by the first ``group_size`` ranks (torchrun packs ranks node by node)."""
        return math.ceil(group_size / self.ranks_per_node)


def human_bytes(size: int) -> str:
    """1024 -> '1 KiB', 1536 -> '1536 B' (only whole KiB/MiB/GiB are abbreviated)."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def compute_dtype(world: World) -> str:
    """GEMM / memory / interference dtype: bf16 on GPUs; fp32 on CPUs (bf16 matmul is emulated)."""
    return "bfloat16" if world.device == "cuda" else "float32"


def modes(world: World, opts: RunOptions) -> tuple[str, ...]:
    return ("eager", "graph") if world.device == "cuda" and opts.graph else ("eager",)


def allreduce_sizes(opts: RunOptions) -> tuple[int, ...]:
    if opts.sizes_bytes:
        return opts.sizes_bytes
    if opts.quick:
        return (1 * KIB, 16 * KIB, 256 * KIB, 4 * MIB)
    return tuple(2**e for e in range(10, 29))  # 1 KiB .. 256 MiB, log-spaced (x2)


def whole_elements_bytes(size_bytes: int, dtype: str) -> int:
    """``size_bytes`` rounded up to a whole number of ``dtype`` elements: what an AllReduce of
    that many bytes really moves (3 B of float32 is one 4 B element)."""
    element = DTYPE_BYTES[dtype]
    return -(-size_bytes // element) * element


def allreduce_dtypes(world: World, opts: RunOptions) -> tuple[str, ...]:
    return opts.dtypes or ((compute_dtype(world),) if opts.quick else ("float16", "bfloat16", "float32"))


def allreduce_dtype_sizes(dtype: str, opts: RunOptions) -> tuple[int, ...]:
    """The sizes measured in ``dtype``: the requested ones, each rounded up to whole elements."""
    return tuple(sorted({whole_elements_bytes(size, dtype) for size in allreduce_sizes(opts)}))


def rounded_sizes_note(world: World, opts: RunOptions) -> str | None:
    """One line listing the requested sizes that are not a whole number of elements of a
    measured dtype and what they are measured and recorded as; None when there are none."""
    changes: dict[tuple[int, int], list[str]] = {}
    for dtype in allreduce_dtypes(world, opts):
        for size in allreduce_sizes(opts):
            if whole_elements_bytes(size, dtype) != size:
                changes.setdefault((size, whole_elements_bytes(size, dtype)), []).append(dtype)
    if not changes:
        return None
    listed = ", ".join(f"{size} B -> {real} B ({', '.join(dtypes)})" for (size, real), dtypes in changes.items())
    return f"sizes rounded up to whole elements, measured and recorded as such: {listed}"


def allreduce_points(world: World, opts: RunOptions) -> list[dict]:
    return [
        {"world_size": world.world_size, "group_size": g, "nodes": world.nodes_of(g), "dtype": dtype,
         "mode": mode, "size_bytes": size}
        for g in range(2, world.world_size + 1)
        for mode in modes(world, opts)
        for dtype in allreduce_dtypes(world, opts)
        for size in allreduce_dtype_sizes(dtype, opts)
    ]


def allgather_points(world: World, opts: RunOptions) -> list[dict]:
    """The logits AllGather of each model's decode step at each batch (``--models``): every rank's
    ``[batch, vocab / tp]`` slice gathered over tp = the world size, in each mode of the run."""
    if world.world_size < 2:
        return []
    dtype, tp = compute_dtype(world), world.world_size
    sizes = sorted({load_model_shape(name).gathered_logits_bytes(batch, tp, DTYPE_BYTES[dtype])
                    for name in opts.models for batch in opts.batch or (1,)})
    return [{"world_size": tp, "group_size": tp, "nodes": world.nodes_of(tp), "dtype": dtype, "mode": mode,
             "size_bytes": size} for mode in modes(world, opts) for size in sizes]


SKEW_STRETCHES = (1, 2, 4, 8, 16)  # modules in a row per timed stretch (a step runs 2 x layers)


def skew_points(world: World, opts: RunOptions) -> list[dict]:
    """The ranks' spread over stretches of the first ``--models`` model's own decode modules (at the
    first ``--batch``), where the collectives progress on the cores that compute (CPU ranks): there
    a rank's time varies with what else the cores run, and a collective waits for the slowest."""
    if world.world_size < 2 or world.device != "cpu" or not opts.models:
        return []
    batch = (opts.batch or (1,))[0]
    return [{"world_size": world.world_size, "group_size": world.world_size, "dtype": compute_dtype(world),
             "model": opts.models[0], "batch": batch, "modules": n} for n in SKEW_STRETCHES]


def _generic_gemm_shapes(world: World, opts: RunOptions) -> list[tuple[int, int, int]]:
    if opts.quick:
        ms, nks, floor = (1, 16, 128), ((128, 128), (512, 512)), ()
    elif world.device == "cuda":
        ms = (1, 4, 16, 64, 256, 1024, 4096, 8192)
        nks = ((1024, 1024), (4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336))
        floor = ((1, 128, 128), (64, 128, 128))  # the kernel floor (launch inside a graph)
    else:
        ms = (1, 4, 16, 64, 256)
        nks = ((256, 256), (1024, 1024), (2048, 2048))
        floor = ((1, 64, 64),)
    return [(m, n, k) for m in ms for n, k in nks] + list(floor)


def model_gemm_shapes(opts: RunOptions) -> list[tuple[int, int, int, str]]:
    """(m, n, k, origin) of every GEMM the model programs run, for each model, TP and batch."""
    out = []
    for name in opts.models:
        shape = load_model_shape(name)
        tps = opts.tp or (1, 2, 4, 8)
        batches = opts.batch or (1, 4, 16, 64)
        for tp in tps:
            if tp > 1 and (shape.n_heads % tp or shape.intermediate_size % tp):
                if opts.tp:
                    shape.check_tp(tp)  # the user asked for it: say why it cannot be
                continue
            d, hd = shape.dim, shape.head_dim
            h_r, kv_r = shape.heads_per_rank(tp), shape.kv_heads_per_rank(tp)
            i_r, v_r = shape.intermediate_per_rank(tp), shape.vocab_per_rank(tp)
            qkv_n = (h_r + 2 * kv_r) * hd
            for batch in batches:
                for phase, m in [("decode", batch)] + [(f"prefill{p}", batch * p) for p in opts.prompt_len]:
                    tag = f"{shape.name} tp{tp} b{batch} {phase}"
                    out += [(m, qkv_n, d, f"{tag} qkv"), (m, d, h_r * hd, f"{tag} o_proj"),
                            (m, 2 * i_r, d, f"{tag} gate_up"), (m, d, i_r, f"{tag} down"),
                            (batch, v_r, d, f"{tag} lm_head")]
    return out


def step_weight_bytes(opts: RunOptions, dtype_bytes: int) -> int:
    """The weight bytes one rank reads per decode step (every layer's QKV, O, gate/up and down
    shards and the LM head's) of the largest of ``opts.models`` over its TP degrees; 0 without
    models. What a decode step streams between two uses of a weight (calibration/gemm_bench.py)."""
    best = 0
    for name in opts.models:
        shape = load_model_shape(name)
        for tp in opts.tp or (1, 2, 4, 8):
            if tp > 1 and (shape.n_heads % tp or shape.intermediate_size % tp):
                continue
            layer = shape.layer_params_per_rank(tp) - 2 * shape.dim  # its linear shards (norms aside)
            best = max(best, (shape.n_layers * layer + shape.vocab_per_rank(tp) * shape.dim) * dtype_bytes)
    return best


def gemm_points(world: World, opts: RunOptions) -> list[dict]:
    shapes = [(m, n, k, "generic") for m, n, k in _generic_gemm_shapes(world, opts)]
    shapes += model_gemm_shapes(opts)
    unique: dict[tuple, str] = {}
    for m, n, k, origin in shapes:
        unique.setdefault((m, n, k), origin)  # the first model op with this shape names it
    return [
        {"dtype": compute_dtype(world), "mode": mode, "m": m, "n": n, "k": k, "origin": origin}
        for mode in modes(world, opts)
        for (m, n, k), origin in unique.items()
    ]


MEMORY_KERNELS = ("copy", "add", "rmsnorm")


def memory_points(world: World, opts: RunOptions) -> list[dict]:
    if opts.quick:
        sizes = (64 * KIB, 4 * MIB)
    elif world.device == "cuda":
        sizes = tuple(4**e * MIB for e in range(0, 6))  # 1 MiB .. 1 GiB
    else:
        sizes = tuple(4**e * 64 * KIB for e in range(0, 6))  # 64 KiB .. 64 MiB
    return [
        {"dtype": compute_dtype(world), "mode": mode, "kernel": kernel, "size_bytes": size}
        for mode in modes(world, opts)
        for kernel in MEMORY_KERNELS
        for size in sizes
    ]


def interference_points(world: World, opts: RunOptions) -> list[dict]:
    if world.world_size < 2:
        return []
    if opts.quick:
        combos = [(1 * MIB, (64, 512, 512))]
    elif world.device == "cuda":
        # Decode-sized messages (16 KiB-1 MiB: batch x hidden x 2 B) up to prefill-sized ones:
        # the slowdowns change with the message, and the profile keeps them per size.
        combos = [(s, g) for s in (16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB, 32 * MIB)
                  for g in ((16, 8192, 8192), (4096, 8192, 8192))]
    else:
        combos = [(s, g) for s in (1 * MIB, 16 * MIB) for g in ((64, 1024, 1024), (256, 1024, 1024))]
    points = [
        {"world_size": world.world_size, "group_size": world.world_size,
         "dtype": compute_dtype(world), "mode": "eager", "size_bytes": size, "m": m, "n": n, "k": k, "model": "-"}
        for size, (m, n, k) in combos
    ]
    if world.device == "cpu" and opts.models:
        # What a run overlaps: the model's own attention + MLP modules beside an async AllReduce of
        # their output (batch x dim elements), at each decode batch; replaces the generic GEMMs.
        points = []
        for name in opts.models:
            shape = load_model_shape(name)
            tp = world.world_size
            if shape.n_heads % tp or shape.intermediate_size % tp:
                continue
            for batch in opts.batch or (1,):
                points.append({"world_size": tp, "group_size": tp, "dtype": compute_dtype(world), "mode": "eager",
                               "size_bytes": batch * shape.dim * DTYPE_BYTES[compute_dtype(world)], "m": batch,
                               "n": shape.dim, "k": shape.intermediate_per_rank(tp), "model": name})
    return points


def overhead_points(world: World, opts: RunOptions) -> list[dict]:
    """Per-op framework cost of each op class (calibration/overhead_bench.py) in each mode a
    run of this device can be in: eager; on GPUs also CUDA graph and torch.compile."""
    run_modes = ("eager", "graph", "compile") if world.device == "cuda" and opts.graph else ("eager",)
    points = [{"dtype": compute_dtype(world), "mode": mode, "op_class": op_class}
              for mode in run_modes for op_class in OP_CLASSES if not (op_class == "collective" and mode != "eager")]
    if opts.models:  # the run's top-k sampling over the vocabulary, eager
        points.append({"dtype": compute_dtype(world), "mode": "eager", "op_class": "sampling"})
    if world.device == "cpu":
        points.append({"dtype": compute_dtype(world), "mode": "eager", "op_class": "cpu_share"})
    return points


OP_CLASSES = ("compute", "view", "collective")  # as calibration/op_trace.py classes trace ops
TRACE_SCHEDULES = ("standard", "parallel", "ladder", "upper_bound")


def ops_points(world: World, opts: RunOptions) -> list[dict]:
    """One decode step of ladder_bench per model and schedule, traced at TP = the world size."""
    points = []
    for name in opts.models:
        shape = load_model_shape(name)
        if world.world_size > 1 and (shape.n_heads % world.world_size or shape.intermediate_size % world.world_size):
            continue
        batch = (opts.batch or (1,))[0]  # op counts do not depend on the batch
        points += [{"model": name, "tp": world.world_size, "batch": batch, "schedule": s} for s in TRACE_SCHEDULES]
    return points


def build_grid(world: World, opts: RunOptions) -> dict[str, list[dict]]:
    """Points per requested benchmark, in measuring order."""
    builders = {"allreduce": allreduce_points, "allgather": allgather_points, "gemm": gemm_points, "memory": memory_points,
                "interference": interference_points, "overhead": overhead_points, "ops": ops_points,
                "skew": skew_points}
    for name in opts.models:
        load_model_shape(name)  # fail early, before any rank starts
    grid = {name: builders[name](world, opts) for name in opts.benchmarks}
    if not any(grid.values()):
        raise UserInputError("benchmarks: nothing to measure with this world size and selection")
    return grid
