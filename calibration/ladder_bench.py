"""Real tensor-parallel generation benchmark: standard, parallel, ladder and upper_bound schedules.

A Llama-shaped decoder with random weights in the compact gpt-fast style (pytorch-labs/gpt-fast
``model.py`` + ``tp.py``), sharded Megatron-style over a torch.distributed group, and timed the way
the Ladder Residual paper (Zhang et al., arXiv 2501.06589) timed its gpt-fast fork: prefill of a
synthetic prompt, then ``gen_len`` new tokens with top-k sampling,
``tokens_per_s = batch * gen_len / (prefill_s + decode_s)``. By default it runs the paper's
benchmark model as its code does (``ladder_model.PAPER``: fused gate/up, math attention over the
whole static cache; the prefill's LM head over every prompt position; fp16, compiled decode with
CUDA graphs and compiled static prefill on GPU); ``--mlp split``, ``--sdpa default``,
``--prefill-logits last``, ``--eager-prefill``, ``--no-compile`` run the variants
(``ladder_config``). The model's forward passes are ``ladder_forward``'s.

Run under ``torchrun`` (NCCL on GPUs), or alone: it then spawns ``--world-size`` local gloo ranks.
The math is testable in-process: :func:`rank_logits` runs one rank's forward given a ``Comm``.
"""

from __future__ import annotations

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
from torch import Tensor

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # run as `python calibration/ladder_bench.py` from a checkout
    sys.path.insert(0, _ROOT)
from calibration.ladder_comm import Comm, DistComm, FuncolComm  # noqa: E402
from calibration.ladder_config import (  # noqa: E402,F401  (check_memory, setting_fields: the bench's API)
    BenchConfig, _launched, build_parser, check_memory, log, make_config, pending_schedules, setting_fields,
)
from calibration.ladder_csv import append_row, read_rows  # noqa: E402
from calibration.ladder_forward import (  # noqa: E402,F401  (SCHEDULES, rank_logits: the bench's API)
    DTYPES, SCHEDULES, compile_decode, compile_prefill, configure_inductor_as_gpt_fast, forward, prefill,
    rank_logits, sample, step,
)
from calibration.ladder_model import PAPER, Transformer, Variant, build_model  # noqa: E402
from calibration.paired_rounds import generations_per_measurement, paired_speedup, round_order  # noqa: E402
from calibration.spawn import RanksFailed, local_rendezvous, loopback_only, spawn_ranks  # noqa: E402
from laddersim.measure.cores import pin_cpu_rank  # noqa: E402
from laddersim.errors import UserInputError  # noqa: E402
from laddersim.support.io_write import lock_run_dir, unlock_run_dir  # noqa: E402
from laddersim.model.shape import load_model_shape  # noqa: E402


# ---- generation ----------------------------------------------------------------------------

@torch.no_grad()
def generate_once(prefill_one: Callable, decode_one: Callable, prompt: Tensor, gen_len: int,
                  sync: Callable) -> tuple[float, float, Tensor]:
    """One timed generation: ``gen_len`` new tokens, the first from the prefill and
    ``gen_len - 1`` from decode steps (gpt-fast's ``generate``). Returns (prefill_s, decode_s, tokens)."""
    bsz, plen = prompt.shape
    new = torch.empty(bsz, gen_len, dtype=torch.long, device=prompt.device)
    prompt_pos = torch.arange(plen, device=prompt.device)
    sync()
    t0 = time.perf_counter()
    tok = prefill_one(prompt, prompt_pos)
    sync()
    t1 = time.perf_counter()
    new[:, :1] = tok
    input_pos = torch.tensor([plen], device=prompt.device)
    for i in range(1, gen_len):
        tok = step(decode_one, tok, input_pos, new, i)
    sync()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, new


def compiled_passes(model: Transformer, cfg: BenchConfig, eager: Comm) -> dict[str, tuple[Callable, Callable]]:
    """Per schedule, (prefill, decode step) as ``cfg`` runs them: each compiled as the paper's
    benchmark compiles it (``ladder_forward.compile_prefill`` / ``compile_decode``, collectives as
    functional collectives) or eager (``eager``: torch.distributed's)."""
    if cfg.compile:
        configure_inductor_as_gpt_fast()
    passes = {}
    for schedule in cfg.schedules:
        decode_comm = FuncolComm() if cfg.compile else eager
        prefill_comm = FuncolComm() if cfg.compile_prefill else eager

        def decode_one(tok, input_pos, schedule=schedule, comm=decode_comm):
            return sample(forward(model, tok, input_pos, schedule, comm), cfg.temperature, cfg.top_k)

        def prefill_one(prompt, input_pos, schedule=schedule, comm=prefill_comm):
            return prefill(model, prompt, input_pos, schedule, comm, cfg.temperature, cfg.top_k,
                           cfg.prefill_logits)

        passes[schedule] = (compile_prefill(prefill_one) if cfg.compile_prefill else prefill_one,
                            compile_decode(decode_one) if cfg.compile else decode_one)
    return passes


def bench_rank(cfg: BenchConfig, rank: int, world_size: int, device: torch.device) -> None:
    """Build this rank's shard, then for each schedule: warm up, time, and (rank 0) write a row."""
    shape = load_model_shape(cfg.model)
    dtype = DTYPES[cfg.dtype]
    if device.type == "cuda":
        sync = torch.cuda.synchronize
    else:
        sync = lambda: None  # noqa: E731  CPU ops (and waited gloo work) are synchronous
    t = time.perf_counter()
    model = build_model(shape, rank, world_size, cfg.batch, cfg.max_seq, cfg.seed, device, dtype, cfg.variant)
    if rank == 0:
        log(f"{shape.name}: built rank shards in {time.perf_counter() - t:.1f} s "
            f"(tp={world_size}, {cfg.backend}, {device.type}, {cfg.dtype}, mlp {cfg.variant.mlp}, "
            f"sdpa {cfg.variant.sdpa})")
    eager = DistComm()
    passes = compiled_passes(model, cfg, eager)
    # The schedules take turns, round by round (calibration/paired_rounds.py): a machine load that
    # drifts during the benchmark then weighs on every schedule alike, and their ratios hold.
    times = {s: {"prefill": [], "decode": []} for s in cfg.schedules}
    tokens, warm_s = {}, dict.fromkeys(cfg.schedules, 0.0)
    for run in range(cfg.warmup):
        for schedule in cfg.schedules:
            p_s, d_s, tokens[schedule] = _generate(passes[schedule], shape, cfg, sync, device, run)
            warm_s[schedule] = p_s + d_s
            if rank == 0:
                log(f"{schedule}: warmup {run + 1}/{cfg.warmup} prefill {p_s:.4f} s decode {d_s:.4f} s")
    gens = _agreed_generations(cfg, warm_s, device)
    for r in range(cfg.repeats):
        run = cfg.warmup + r
        for schedule in round_order(cfg.schedules, r):
            p_sum = d_sum = 0.0
            for g in range(gens[schedule]):
                p_s, d_s, tokens[schedule] = _generate(passes[schedule], shape, cfg, sync, device,
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
            _write_row(cfg, world_size, device, schedule, times, gens[schedule])


def _write_row(cfg: BenchConfig, world_size: int, device: torch.device, schedule: str, times: dict,
               generations: int) -> None:
    """Rank 0: the schedule's medians as one CSV row (and a log line)."""
    p_s, d_s = statistics.median(times[schedule]["prefill"]), statistics.median(times[schedule]["decode"])
    row = {
        **setting_fields(cfg, world_size), "schedule": schedule,
        "tokens_per_s": round(cfg.batch * cfg.gen_len / (p_s + d_s), 4),
        "prefill_s": round(p_s, 6), "decode_s": round(d_s, 6), "backend": cfg.backend,
        "device": device.type, "repeats": cfg.repeats, "generations": generations,
        **_speedup_fields(times, schedule),
    }
    spread = (f"; speedup {row['speedup']} (quartiles {row['speedup_q1']}-{row['speedup_q3']})"
              if row.get("speedup") != "" else "")
    log(f"{schedule}: {row['tokens_per_s']} tokens/s (median of {cfg.repeats} rounds){spread}")
    if cfg.out:
        append_row(cfg.out, row)


def _generate(passes: tuple[Callable, Callable], shape, cfg: BenchConfig, sync, device, seed_offset: int):
    """One generation after a barrier; the prompt and the sampling noise from ``cfg.seed +
    seed_offset`` (the same on every rank and for every schedule of a round)."""
    torch.manual_seed(cfg.seed + seed_offset)
    prompt = torch.randint(0, shape.vocab_size, (cfg.batch, cfg.prompt_len), device=device)
    dist.barrier()
    return generate_once(*passes, prompt, cfg.gen_len, sync)


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


def _tokens_agree(tokens: Tensor, comm: DistComm) -> bool:
    lo, hi = tokens.clone(), tokens.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return bool(torch.equal(lo, hi))


# ---- process groups ------------------------------------------------------------------------

def _init_group(backend: str, rank: int, world_size: int, init_method: str | None,
                local_world_size: int) -> None:
    if backend == "gloo":
        # Each local rank on its share of the cores, as calibrate runs them (laddersim.measure.cores).
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
                   outdir: str, variant: Variant) -> None:
    _init_group("gloo", rank, world_size, init_method, world_size)
    try:
        comm = DistComm()
        result = {s: rank_logits(load_model_shape(model), rank, world_size, comm, s, tokens,
                                 prompt_len, seed, variant=variant) for s in schedules}
        torch.save(result, Path(outdir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def trace_logits(model: str, world_size: int, schedules: Sequence[str], tokens: Tensor,
                 prompt_len: int, seed: int = 0, variant: Variant = PAPER) -> dict[str, list[Tensor]]:
    """Run :func:`rank_logits` on ``world_size`` spawned gloo ranks (float32, CPU);
    returns ``{schedule: [logits of rank 0, rank 1, ...]}``."""
    with tempfile.TemporaryDirectory() as outdir:
        mp.spawn(_spawned_trace, nprocs=world_size, join=True, args=(
            world_size, local_rendezvous(outdir), model, tuple(schedules), tokens,
            prompt_len, seed, outdir, variant))
        per_rank = [torch.load(Path(outdir) / f"rank{r}.pt") for r in range(world_size)]
    return {s: [r[s] for r in per_rank] for s in schedules}


# ---- command line --------------------------------------------------------------------------

def _lock_out(out: str | None) -> None:
    """One writer per --out CSV: a lock file beside it (``.NAME.lock``), held until ``_unlock_out``."""
    if out:
        path = Path(out)
        lock_run_dir(path.parent, "--out", f".{path.name}.lock", shown=path)


def _unlock_out(out: str | None) -> None:
    """Release ``_lock_out``'s lock and delete its file: nothing is left beside the user's CSV."""
    if out:
        path = Path(out)
        unlock_run_dir(path.parent, f".{path.name}.lock", remove=True)


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
        try:
            cfg = dataclasses.replace(cfg, schedules=pending_schedules(cfg, world_size))
            if cfg.schedules:
                rows_before = len(read_rows(cfg.out)[1]) if cfg.out else 0
                try:  # the ranks ignore Ctrl-C; this parent stops them (see spawn.spawn_ranks)
                    with tempfile.TemporaryDirectory(prefix="ladder-bench-") as store:
                        spawn_ranks(_spawned_bench, world_size, (world_size, cfg, local_rendezvous(store)))
                except KeyboardInterrupt:
                    print(f"interrupted: {_kept(cfg, rows_before)}", file=sys.stderr)
                    return 130
                except RanksFailed as exc:  # one line: which rank ended how (its traceback if a bug)
                    account = exc.cause.account
                    if account is not None and account.detail:
                        print(account.detail, file=sys.stderr, end="")
                    print(f"error: {exc}; {_kept(cfg, rows_before)}", file=sys.stderr)
                    return 2 if account is not None and account.kind == "disk" else 1
        finally:  # done, refused or interrupted: no lock file left beside --out
            _unlock_out(cfg.out)
    if not cfg.schedules and rank == 0:
        log(f"nothing to measure: every requested schedule is already in {cfg.out}")
    return 0


def _kept(cfg, rows_before: int) -> str:
    written = len(read_rows(cfg.out)[1]) - rows_before if cfg.out else 0
    return (f"{written} row(s) written to {cfg.out} are kept; re-run the same command to measure the rest"
            if written else "no row written by this run")


if __name__ == "__main__":
    sys.exit(main())
