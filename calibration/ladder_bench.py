"""Real tensor-parallel generation benchmark: standard, parallel, ladder and upper_bound schedules.

A Llama-shaped decoder with random weights in the compact gpt-fast style (pytorch-labs/gpt-fast
``model.py`` + ``tp.py``), sharded Megatron-style over a torch.distributed group, and timed the way
the Ladder Residual paper (Zhang et al., arXiv 2501.06589) timed its gpt-fast fork: prefill of a
synthetic prompt, then ``gen_len`` new tokens with top-k sampling,
``tokens_per_s = batch * gen_len / (prefill_s + decode_s)``.

Run under ``torchrun`` (NCCL on GPUs), or alone: it then spawns ``--world-size`` local gloo ranks.
The math is testable in-process: :func:`rank_logits` runs one rank's forward given a ``Comm``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import Tensor

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # run as `python calibration/ladder_bench.py` from a checkout
    sys.path.insert(0, _ROOT)
from calibration.bench_launch import local_rendezvous, loopback_only, spawn_ranks  # noqa: E402
from calibration.ladder_comm import NO_COMM, Comm, DistComm, FuncolComm  # noqa: E402
from calibration.ladder_csv import append_row, check_out_csv, read_rows, row_key  # noqa: E402
from calibration.ladder_model import (  # noqa: E402
    Transformer, attn_norm, build_model, final_norm, mlp_norm, norm, residual_add,
)
from calibration.ladder_memory import GIB, available_host_bytes, peak_bytes_per_rank  # noqa: E402
from calibration.paired_rounds import generations_per_measurement, paired_speedup, round_order  # noqa: E402
from laddersim.calibrate.cores import pin_cpu_rank  # noqa: E402
from laddersim.errors import UserInputError  # noqa: E402
from laddersim.io_write import lock_run_dir  # noqa: E402
from laddersim.model_shape import ModelShape, load_model_shape  # noqa: E402

SCHEDULES = ("standard", "parallel", "ladder", "upper_bound")
# The mode column: a torch.compile'd (CUDA-graph) decode step or an eager one.
MODES = {True: "compile", False: "eager"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def log(msg: str) -> None:
    print(f"[ladder_bench] {msg}", file=sys.stderr, flush=True)


def configure_inductor_as_gpt_fast() -> None:
    """Inductor's settings of gpt-fast's ``generate.py`` (``coordinate_descent_tuning``: with it
    a batch-1 linear is lowered to a generated reduction on GPU, see the gpt-fast framework file
    laddersim/data/frameworks/gpt-fast.yaml; ``unique_kernel_names``: kernels named after the ops
    they fuse). Triton only: a CPU run compiles the same graph to C++ either way."""
    import torch._inductor.config as inductor_config
    inductor_config.coordinate_descent_tuning = True
    inductor_config.triton.unique_kernel_names = True


# ---- memory pre-check ----------------------------------------------------------------------

def check_memory(cfg: BenchConfig, tp: int, device: torch.device, local_ranks: int) -> None:
    """Raise UserInputError (one line) unless :func:`peak_bytes_per_rank` fits: on CUDA in this
    rank's free GPU memory, on CPU times ``local_ranks`` (the ranks sharing this host) in
    :func:`available_host_bytes`. Nothing is allocated before this check."""
    shape = load_model_shape(cfg.model)
    rank_bytes = peak_bytes_per_rank(shape, tp, cfg.batch, cfg.prompt_len, cfg.gen_len,
                                     DTYPES[cfg.dtype].itemsize)
    need = f"an estimated {rank_bytes / GIB:.1f} GiB per rank (weights, KV cache, margin)"
    if device.type == "cuda":
        need_bytes = rank_bytes
        free_bytes, _ = torch.cuda.mem_get_info(device)
        where = f"GPU {device.index} has {free_bytes / GIB:.1f} GiB free"
        bigger_tp = "a higher TP degree, "
    else:
        need_bytes = rank_bytes * local_ranks
        free_bytes = available_host_bytes()
        if free_bytes is None:
            return
        need += f" x {local_ranks} ranks on this host = {need_bytes / GIB:.1f} GiB"
        where = f"only {free_bytes / GIB:.1f} GiB is available"
        bigger_tp = ""  # the ranks share the host: more of them do not need less in total
    if need_bytes > free_bytes:
        raise UserInputError(
            f"--model: {cfg.model} at tp={tp}, batch={cfg.batch}, prompt_len+gen_len="
            f"{cfg.prompt_len + cfg.gen_len}, {cfg.dtype} needs {need}, but {where}; use a smaller "
            f"model (a smaller preset, or a config.json with fewer layers or a smaller hidden_size), "
            f"{bigger_tp}{'--dtype bfloat16, ' if cfg.dtype == 'float32' else ''}"
            f"or a smaller --batch/--prompt-len/--gen-len")


# ---- schedules -----------------------------------------------------------------------------
# Each takes the embedded input and returns the residual stream before the final norm.

def standard(model: Transformer, x: Tensor, rope: tuple, comm: Comm) -> Tensor:
    for layer in model.layers:
        x = residual_add(x, comm.all_reduce(layer.attention(attn_norm(x, layer.attention_norm), *rope)))
        x = residual_add(x, comm.all_reduce(layer.feed_forward(mlp_norm(x, layer.ffn_norm))))
    return x


def parallel(model: Transformer, x: Tensor, rope: tuple, comm: Comm) -> Tensor:
    for layer in model.layers:
        x = residual_add(x, comm.all_reduce(layer.fused(norm(x, layer.attention_norm), *rope)))
    return x


def ladder(model: Transformer, x: Tensor, rope: tuple, comm: Comm) -> Tensor:
    """Module i (attn of layer i//2 if i is even, else its MLP) reads the residual before module
    i-1's output is added; AR(y_i) is waited on only just before module i+2 runs."""
    pending = []
    for i in range(2 * len(model.layers)):
        layer = model.layers[i // 2]
        if i >= 2:
            x = residual_add(x, pending[i - 2].wait())
        if i % 2 == 0:
            y = layer.attention(attn_norm(x, layer.attention_norm), *rope)
        else:
            y = layer.feed_forward(mlp_norm(x, layer.ffn_norm))
        pending.append(comm.start(y))
    for p in pending[-2:]:
        x = residual_add(x, p.wait())
    return x


def upper_bound(model: Transformer, x: Tensor, rope: tuple, comm: Comm) -> Tensor:
    """Standard with every AllReduce dropped: each rank adds its own partial sum (ranks diverge)."""
    return standard(model, x, rope, NO_COMM)


SCHEDULE_FNS: dict[str, Callable] = {
    "standard": standard, "parallel": parallel, "ladder": ladder, "upper_bound": upper_bound,
}


def forward(model: Transformer, tokens: Tensor, input_pos: Tensor, schedule: str, comm: Comm,
            last_only: bool = False) -> Tensor:
    """Logits ``[B, S, vocab]`` (``S = 1`` if ``last_only``) for ``tokens [B, S]`` at
    positions ``input_pos [S]``; writes those positions into the KV caches."""
    x, rope = embed(model, tokens, input_pos)
    x = SCHEDULE_FNS[schedule](model, x, rope, comm)
    if last_only:
        x = x[:, -1:]
    return vocab_logits(model, comm.gather_vocab(lm_head(model, final_norm(x, model.norm))))


def embed(model: Transformer, tokens: Tensor, input_pos: Tensor) -> tuple[Tensor, tuple]:
    """The token embeddings and the RoPE table rows, mask rows and positions of this pass."""
    rope = (model.freqs_cis[input_pos], model.causal_mask[None, None, input_pos], input_pos)
    return F.embedding(tokens, model.tok_embeddings), rope


def lm_head(model: Transformer, x: Tensor) -> Tensor:
    return F.linear(x, model.output)


def vocab_logits(model: Transformer, logits: Tensor) -> Tensor:
    return logits[..., : model.shape.vocab_size]  # drop the padding rows of the last shard


@torch.no_grad()
def rank_logits(shape: ModelShape, rank: int, world_size: int, comm: Comm, schedule: str,
                tokens: Tensor, prompt_len: int, seed: int = 0, dtype=torch.float32) -> Tensor:
    """One rank's logits ``[B, T, vocab]`` for ``tokens [B, T]``: a prefill of the first
    ``prompt_len`` tokens, then teacher-forced one-token decode steps through the KV cache."""
    model = build_model(shape, rank, world_size, tokens.shape[0], tokens.shape[1], seed,
                        tokens.device, dtype)
    dev = tokens.device
    out = [forward(model, tokens[:, :prompt_len], torch.arange(prompt_len, device=dev), schedule, comm)]
    for pos in range(prompt_len, tokens.shape[1]):
        step = torch.tensor([pos], device=dev)
        out.append(forward(model, tokens[:, pos: pos + 1], step, schedule, comm))
    return torch.cat(out, dim=1)


# ---- generation ----------------------------------------------------------------------------

def sample(logits: Tensor, temperature: float, top_k: int) -> Tensor:
    """gpt-fast's top-k sampling of the last position; ``[B, 1]`` token ids. Uses the global
    generator, seeded identically on every rank, so ranks with equal logits pick equal tokens."""
    logits = logits[:, -1] / max(temperature, 1e-5)
    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
    logits = torch.where(logits < v[:, -1:], -float("inf"), logits)
    probs = torch.softmax(logits, dim=-1)
    q = torch.empty_like(probs).exponential_(1)  # Gumbel-style sampling without a CPU sync
    return torch.argmax(probs / q, dim=-1, keepdim=True)


def step(decode_one: Callable, tok: Tensor, input_pos: Tensor, new: Tensor, i: int) -> Tensor:
    """One decode step of ``generate_once``: token ``i`` of every sequence into ``new``."""
    tok = decode_one(tok, input_pos).clone()  # clone: CUDA-graph outputs get overwritten
    input_pos += 1
    new[:, i: i + 1] = tok
    return tok


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    model: str
    schedules: tuple[str, ...]
    batch: int
    prompt_len: int
    gen_len: int
    warmup: int
    repeats: int
    backend: str
    device: str  # "cpu" or "cuda"
    dtype: str
    out: str | None
    seed: int
    top_k: int
    temperature: float
    compile: bool
    nodes: int
    p2p: str
    min_time_s: float = 0.0  # a measurement's least duration (more generations back to back)


@torch.no_grad()
def generate_once(model: Transformer, comm: Comm, schedule: str, prompt: Tensor, gen_len: int,
                  decode_one: Callable, cfg: BenchConfig, sync: Callable) -> tuple[float, float, Tensor]:
    """One timed generation: ``gen_len`` new tokens, the first from the prefill and
    ``gen_len - 1`` from decode steps (gpt-fast's ``generate``). Returns (prefill_s, decode_s, tokens)."""
    bsz, plen = prompt.shape
    new = torch.empty(bsz, gen_len, dtype=torch.long, device=prompt.device)
    sync()
    t0 = time.perf_counter()
    logits = forward(model, prompt, torch.arange(plen, device=prompt.device), schedule, comm, True)
    tok = sample(logits, cfg.temperature, cfg.top_k)
    sync()
    t1 = time.perf_counter()
    new[:, :1] = tok
    input_pos = torch.tensor([plen], device=prompt.device)
    for i in range(1, gen_len):
        tok = step(decode_one, tok, input_pos, new, i)
    sync()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, new


def bench_rank(cfg: BenchConfig, rank: int, world_size: int, device: torch.device) -> None:
    """Build this rank's shard, then for each schedule: warm up, time, and (rank 0) write a row."""
    shape = load_model_shape(cfg.model)
    dtype = DTYPES[cfg.dtype]
    max_seq = cfg.prompt_len + cfg.gen_len
    if device.type == "cuda":
        sync = torch.cuda.synchronize
    else:
        sync = lambda: None  # noqa: E731  CPU ops (and waited gloo work) are synchronous
    t = time.perf_counter()
    model = build_model(shape, rank, world_size, cfg.batch, max_seq, cfg.seed, device, dtype)
    if rank == 0:
        log(f"{shape.name}: built rank shards in {time.perf_counter() - t:.1f} s "
            f"(tp={world_size}, {cfg.backend}, {device.type}, {cfg.dtype})")
    eager = DistComm()
    if cfg.compile:
        configure_inductor_as_gpt_fast()
    decoders = {}
    for schedule in cfg.schedules:
        comm = FuncolComm() if cfg.compile else eager

        def decode_one(tok, input_pos, schedule=schedule, comm=comm):
            logits = forward(model, tok, input_pos, schedule, comm)
            return sample(logits, cfg.temperature, cfg.top_k)

        decoders[schedule] = (torch.compile(decode_one, mode="reduce-overhead", fullgraph=True)
                              if cfg.compile else decode_one)
    # The schedules take turns, round by round (calibration/paired_rounds.py): a machine load that
    # drifts during the benchmark then weighs on every schedule alike, and their ratios hold.
    times = {s: {"prefill": [], "decode": []} for s in cfg.schedules}
    tokens, warm_s = {}, dict.fromkeys(cfg.schedules, 0.0)
    for run in range(cfg.warmup):
        for schedule in cfg.schedules:
            p_s, d_s, tokens[schedule] = _generate(model, eager, schedule, shape, cfg, decoders, sync, device, run)
            warm_s[schedule] = p_s + d_s
            if rank == 0:
                log(f"{schedule}: warmup {run + 1}/{cfg.warmup} prefill {p_s:.4f} s decode {d_s:.4f} s")
    gens = _agreed_generations(cfg, warm_s, device)
    for r in range(cfg.repeats):
        run = cfg.warmup + r
        for schedule in round_order(cfg.schedules, r):
            p_sum = d_sum = 0.0
            for g in range(gens[schedule]):
                p_s, d_s, tokens[schedule] = _generate(model, eager, schedule, shape, cfg, decoders, sync, device,
                                                       run + g * (cfg.warmup + cfg.repeats))
                p_sum, d_sum = p_sum + p_s, d_sum + d_s
            times[schedule]["prefill"].append(p_sum / gens[schedule])
            times[schedule]["decode"].append(d_sum / gens[schedule])
            if rank == 0:
                log(f"{schedule}: round {r + 1}/{cfg.repeats} ({gens[schedule]} generation(s)) prefill "
                    f"{p_sum / gens[schedule]:.4f} s decode {d_sum / gens[schedule]:.4f} s per generation")
    for schedule in cfg.schedules:
        if schedule != "upper_bound" and not _tokens_agree(tokens[schedule], eager):
            log(f"{schedule}: WARNING ranks sampled different tokens (logits differ across ranks)")
        if rank == 0:
            p_s, d_s = statistics.median(times[schedule]["prefill"]), statistics.median(times[schedule]["decode"])
            row = {
                **setting_fields(cfg, world_size), "schedule": schedule,
                "tokens_per_s": round(cfg.batch * cfg.gen_len / (p_s + d_s), 4),
                "prefill_s": round(p_s, 6), "decode_s": round(d_s, 6), "backend": cfg.backend,
                "device": device.type, "repeats": cfg.repeats, "generations": gens[schedule],
                **_speedup_fields(times, schedule),
            }
            spread = (f"; speedup {row['speedup']} (quartiles {row['speedup_q1']}-{row['speedup_q3']})"
                      if row.get("speedup") != "" else "")
            log(f"{schedule}: {row['tokens_per_s']} tokens/s (median of {cfg.repeats} rounds){spread}")
            if cfg.out:
                append_row(cfg.out, row)


def _generate(model, comm, schedule, shape, cfg, decoders, sync, device, seed_offset: int):
    """One generation of ``schedule`` after a barrier; the prompt and the sampling noise from
    ``cfg.seed + seed_offset`` (the same on every rank and for every schedule of a round)."""
    torch.manual_seed(cfg.seed + seed_offset)
    prompt = torch.randint(0, shape.vocab_size, (cfg.batch, cfg.prompt_len), device=device)
    dist.barrier()
    return generate_once(model, comm, schedule, prompt, cfg.gen_len, decoders[schedule], cfg, sync)


def _agreed_generations(cfg: BenchConfig, warm_s: dict[str, float], device) -> dict[str, int]:
    """Generations per measurement of each schedule (``paired_rounds.generations_per_measurement``
    of its last warm-up), the same on every rank (the slowest rank's warm-up decides)."""
    warm = torch.tensor([warm_s[s] for s in cfg.schedules], dtype=torch.float64)
    dist.all_reduce(warm, op=dist.ReduceOp.MAX)
    return {s: generations_per_measurement(float(w), cfg.min_time_s) for s, w in zip(cfg.schedules, warm)}


def _speedup_fields(times: dict, schedule: str) -> dict:
    """The row's speedup over ``standard`` as the median of the per-round ratios, with its
    quartiles (blank without a ``standard`` measured in the same rounds)."""
    if "standard" not in times:
        return {"speedup": "", "speedup_q1": "", "speedup_q3": ""}
    total = {s: [p + d for p, d in zip(t["prefill"], t["decode"])] for s, t in times.items()}
    median, q1, q3 = paired_speedup(total["standard"], total[schedule])
    return {"speedup": round(median, 4), "speedup_q1": round(q1, 4), "speedup_q3": round(q3, 4)}


def setting_fields(cfg: BenchConfig, tp: int) -> dict:
    """The row's columns that say what was measured, but for the schedule (see ``ladder_csv.RESUME_KEY``)."""
    return {
        "model": model_field(cfg.model, cfg.out), "tp": tp, "nodes": cfg.nodes, "batch": cfg.batch,
        "prompt_len": cfg.prompt_len, "gen_len": cfg.gen_len, "p2p": cfg.p2p, "dtype": cfg.dtype,
        "mode": MODES[cfg.compile],
    }


def model_field(model: str, out: str | None) -> str:
    """The CSV's model column: a preset by name, a config.json by its path relative to the CSV
    (``laddersim validate`` / ``fit`` read it from there, wherever they are run)."""
    if not Path(model).exists():
        return model
    base = Path(out).resolve().parent if out else Path.cwd()
    return os.path.relpath(Path(model).resolve(), base)


def _tokens_agree(tokens: Tensor, comm: DistComm) -> bool:
    lo, hi = tokens.clone(), tokens.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return bool(torch.equal(lo, hi))


# ---- output CSV ----------------------------------------------------------------------------

def pending_schedules(cfg: BenchConfig, tp: int) -> tuple[str, ...]:
    """``cfg.schedules`` but those whose row (same ``ladder_csv.RESUME_KEY``) is already in ``cfg.out``;
    logs one line per skipped schedule. Deleting a row from the CSV measures it again."""
    if not cfg.out:
        return cfg.schedules
    done = {row_key(r) for r in read_rows(cfg.out)[1]}
    setting = setting_fields(cfg, tp)
    pending = []
    for schedule in cfg.schedules:
        if row_key({**setting, "schedule": schedule}) in done:
            log(f"{schedule}: already measured in {cfg.out} (tp={tp}, batch={cfg.batch}, "
                f"prompt_len={cfg.prompt_len}, gen_len={cfg.gen_len}, p2p={cfg.p2p}, {cfg.dtype}, "
                f"{MODES[cfg.compile]}); "
                "skipped (delete its row to measure it again)")
        else:
            pending.append(schedule)
    return tuple(pending)


# ---- process groups ------------------------------------------------------------------------

def _init_group(backend: str, rank: int, world_size: int, init_method: str | None,
                local_world_size: int) -> None:
    if backend == "gloo":
        # Each local rank on its share of the cores, as calibrate runs them (laddersim.calibrate.cores).
        pin_cpu_rank(int(os.environ.get("LOCAL_RANK", rank)), local_world_size)
    if init_method and init_method.startswith("file://"):
        loopback_only()  # locally spawned: nothing listens beyond the loopback
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)


def _spawned_bench(rank: int, world_size: int, cfg: BenchConfig, init_method: str) -> None:
    _init_group(cfg.backend, rank, world_size, init_method, world_size)
    try:
        bench_rank(cfg, rank, world_size, torch.device("cpu"))
    finally:
        dist.destroy_process_group()


def _spawned_trace(rank: int, world_size: int, init_method: str, model: str,
                   schedules: Sequence[str], tokens: Tensor, prompt_len: int, seed: int,
                   outdir: str) -> None:
    _init_group("gloo", rank, world_size, init_method, world_size)
    try:
        comm = DistComm()
        result = {s: rank_logits(load_model_shape(model), rank, world_size, comm, s, tokens,
                                 prompt_len, seed) for s in schedules}
        torch.save(result, Path(outdir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def trace_logits(model: str, world_size: int, schedules: Sequence[str], tokens: Tensor,
                 prompt_len: int, seed: int = 0) -> dict[str, list[Tensor]]:
    """Run :func:`rank_logits` on ``world_size`` spawned gloo ranks (float32, CPU);
    returns ``{schedule: [logits of rank 0, rank 1, ...]}``."""
    with tempfile.TemporaryDirectory() as outdir:
        mp.spawn(_spawned_trace, nprocs=world_size, join=True, args=(
            world_size, local_rendezvous(outdir), model, tuple(schedules), tokens,
            prompt_len, seed, outdir))
        per_rank = [torch.load(Path(outdir) / f"rank{r}.pt") for r in range(world_size)]
    return {s: [r[s] for r in per_rank] for s in schedules}


# ---- command line --------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(description=__doc__.split("\n\n")[0],
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="llama-3.1-8b",
                   help="preset (llama-3.1-8b/70b/405b) or path to a Hugging Face config.json")
    p.add_argument("--schedule", action="append", choices=SCHEDULES,
                   help="repeatable; default: all four")
    p.add_argument("--world-size", type=int, default=2,
                   help="local ranks to spawn when not under torchrun (= TP degree)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                   help="default: float32 on CPU, bfloat16 on GPU")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=1024)
    p.add_argument("--gen-len", type=int, default=512,
                   help="new tokens per sequence: 1 from the prefill + gen_len-1 decode steps")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3,
                   help="timed rounds (one measurement of each schedule per round); medians are reported")
    p.add_argument("--min-time-s", type=float, default=0.0,
                   help="least duration of a measurement: enough generations back to back (from the "
                        "warm-up's time); 0: one generation")
    p.add_argument("--top-k", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--compile", action="store_true",
                   help="torch.compile(mode='reduce-overhead') the decode step")
    p.add_argument("--out", default=None, help="CSV to append rows to (header written once)")
    return p


def _positive(name: str, value: int, minimum: int = 1) -> None:
    if value < minimum:
        raise UserInputError(f"{name}: must be an integer >= {minimum}, got {value}")


def _lock_out(out: str | None) -> None:
    """One writer per --out CSV: a lock file beside it (``.NAME.lock``), held until this process ends."""
    if out:
        path = Path(out)
        lock_run_dir(path.parent, "--out", f".{path.name}.lock", shown=path)


def _launched() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def make_config(args: argparse.Namespace, world_size: int, check_out: bool) -> BenchConfig:
    """Validate the flags (UserInputError naming the flag) and resolve backend/device/dtype."""
    _positive("--world-size", world_size)
    try:
        shape = load_model_shape(args.model)
    except UserInputError as exc:
        raise UserInputError(f"--model: {str(exc).removeprefix('model: ')}") from None
    try:
        shape.check_tp(world_size)
    except UserInputError as exc:
        raise UserInputError(f"--world-size (the TP degree): {str(exc).removeprefix('tp: ')}") from None
    for name in ("batch", "prompt_len", "gen_len", "repeats", "top_k"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    _positive("--warmup", args.warmup, 0)
    if args.temperature < 0:
        raise UserInputError(f"--temperature: must be >= 0, got {args.temperature}")
    if not 0.0 <= args.min_time_s <= 3600.0:
        raise UserInputError(f"--min-time-s: must be between 0 and 3600, got {args.min_time_s}")
    cuda = torch.cuda.is_available()
    backend = args.backend if args.backend != "auto" else ("nccl" if cuda else "gloo")
    if backend == "nccl" and not cuda:
        raise UserInputError("--backend: nccl needs CUDA and none is available; allowed here: auto, gloo")
    if backend == "nccl" and not _launched():
        raise UserInputError("--backend: nccl runs under torchrun (one process per GPU); "
                             "without a launcher allowed: gloo, auto")
    device = "cuda" if backend == "nccl" else "cpu"
    dtype = args.dtype or ("bfloat16" if device == "cuda" else "float32")
    if check_out and args.out:
        check_out_csv(args.out)
    nodes = int(os.environ.get("GROUP_WORLD_SIZE")
                or world_size // int(os.environ.get("LOCAL_WORLD_SIZE", world_size)) or 1)
    return BenchConfig(
        model=args.model, schedules=tuple(dict.fromkeys(args.schedule or SCHEDULES)),
        batch=args.batch, prompt_len=args.prompt_len, gen_len=args.gen_len, warmup=args.warmup,
        repeats=args.repeats, backend=backend, device=device, dtype=dtype, out=args.out,
        seed=args.seed, top_k=args.top_k, temperature=args.temperature, compile=args.compile,
        nodes=nodes, p2p="off" if os.environ.get("NCCL_P2P_DISABLE") == "1" else "on",
        min_time_s=args.min_time_s,
    )


def _rank_device(cfg: BenchConfig, launched: bool) -> torch.device:
    """This process's device: under torchrun on CUDA the GPU of ``LOCAL_RANK`` (made current)."""
    if launched and cfg.device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _agreed_schedules(cfg: BenchConfig, rank: int, tp: int) -> BenchConfig:
    """Rank 0's :func:`pending_schedules` (only it reads ``--out``), broadcast to every rank."""
    pending = [pending_schedules(cfg, tp) if rank == 0 else None]
    dist.broadcast_object_list(pending, src=0)
    return dataclasses.replace(cfg, schedules=pending[0])


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    launched = _launched()
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ["WORLD_SIZE"]) if launched else args.world_size
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size)) if launched else world_size
    try:
        cfg = make_config(args, world_size, check_out=rank == 0)
        device = _rank_device(cfg, launched)
        check_memory(cfg, world_size, device, local_ranks)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if launched:
        _init_group(cfg.backend, rank, world_size, "env://", local_ranks)
        try:
            cfg = _agreed_schedules(cfg, rank, world_size)
            if cfg.schedules:
                bench_rank(cfg, rank, world_size, device)
        finally:
            dist.destroy_process_group()
    else:
        try:
            _lock_out(cfg.out)  # before reading --out: a second writer is refused, never interleaved
        except UserInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        cfg = dataclasses.replace(cfg, schedules=pending_schedules(cfg, world_size))
        if cfg.schedules:
            rows_before = len(read_rows(cfg.out)[1]) if cfg.out else 0
            try:  # the ranks ignore Ctrl-C; this parent stops them (see bench_launch.spawn_ranks)
                with tempfile.TemporaryDirectory(prefix="ladder-bench-") as store:
                    spawn_ranks(_spawned_bench, world_size, (world_size, cfg, local_rendezvous(store)))
            except KeyboardInterrupt:
                written = len(read_rows(cfg.out)[1]) - rows_before if cfg.out else 0
                kept = (f"{written} row(s) written to {cfg.out} are kept; re-run the same command to measure "
                        "the rest" if written else "no row written by this run")
                print(f"interrupted: {kept}", file=sys.stderr)
                return 130
    if not cfg.schedules and rank == 0:
        log(f"nothing to measure: every requested schedule is already in {cfg.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
