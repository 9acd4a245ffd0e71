"""The benchmark's forward passes: the four schedules over ``ladder_model``'s shard, the logits,
gpt-fast's sampling, and the prefill and decode step as the paper's benchmark compiles them.

Shared by ``ladder_bench.py`` (timed generations), ``kernel_trace.py`` (a step's kernels),
``op_trace.py`` (a step's framework ops) and ``overhead_bench.py``. Every function that is an op
kind of laddersim's op program carries its name (``op_trace.FRAME_KINDS``).

Compiled as the paper's benchmark compiles them (../shared/docs/ladder-residual.md): the decode
step (forward + sampling) with ``torch.compile(mode="reduce-overhead", fullgraph=True)`` (CUDA
graphs, Inductor kernels, gpt-fast's Inductor options); the prefill (forward of the prompt +
sampling) with ``torch.compile(dynamic=False, fullgraph=True)``: static shapes, no CUDA graphs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # imported by `python calibration/ladder_bench.py` from a checkout
    sys.path.insert(0, _ROOT)
from calibration.ladder_comm import NO_COMM, Comm  # noqa: E402
from calibration.ladder_model import (  # noqa: E402
    PAPER, Transformer, Variant, attn_norm, build_model, final_norm, mlp_norm, norm, residual_add,
)
from laddersim.model.shape import ModelShape  # noqa: E402

SCHEDULES = ("standard", "parallel", "ladder", "upper_bound")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def default_dtype(device: str) -> str:
    """The paper's precision on GPU (fp16); float32 on CPU, the CPU twin: CPU GEMMs in float16
    are slow or missing in many torch builds, and the twin measures kernel structure, not speed."""
    return "float16" if device == "cuda" else "float32"


def configure_inductor_as_gpt_fast() -> None:
    """Inductor's settings of gpt-fast's ``generate.py`` (``coordinate_descent_tuning``: with it
    a batch-1 linear is lowered to a generated reduction on GPU, see the gpt-fast framework file
    laddersim/data/frameworks/gpt-fast.yaml; ``unique_kernel_names``: kernels named after the ops
    they fuse). Triton only: a CPU run compiles the same graph to C++ either way."""
    import torch._inductor.config as inductor_config
    inductor_config.coordinate_descent_tuning = True
    inductor_config.triton.unique_kernel_names = True


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
                tokens: Tensor, prompt_len: int, seed: int = 0, dtype=torch.float32,
                variant: Variant = PAPER) -> Tensor:
    """One rank's logits ``[B, T, vocab]`` for ``tokens [B, T]``: a prefill of the first
    ``prompt_len`` tokens, then teacher-forced one-token decode steps through the KV cache."""
    model = build_model(shape, rank, world_size, tokens.shape[0], tokens.shape[1], seed,
                        tokens.device, dtype, variant)
    dev = tokens.device
    out = [forward(model, tokens[:, :prompt_len], torch.arange(prompt_len, device=dev), schedule, comm)]
    for pos in range(prompt_len, tokens.shape[1]):
        step = torch.tensor([pos], device=dev)
        out.append(forward(model, tokens[:, pos: pos + 1], step, schedule, comm))
    return torch.cat(out, dim=1)


# ---- generation: what gpt-fast's generate.py runs around the model ---------------------------

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


def compile_decode(fn: Callable) -> Callable:
    """The paper's compiled decode step: CUDA graphs (``reduce-overhead``), one graph, Inductor."""
    return torch.compile(fn, mode="reduce-overhead", fullgraph=True)


def compile_prefill(fn: Callable) -> Callable:
    """The paper's compiled prefill ("Compiling prefill with dynamic=False"): static shapes, no CUDA graphs."""
    return torch.compile(fn, dynamic=False, fullgraph=True)


PREFILL_LOGITS = ("all", "last")


def prefill(model: Transformer, prompt: Tensor, input_pos: Tensor, schedule: str, comm: Comm,
            temperature: float, top_k: int, logits: str = "all") -> Tensor:
    """gpt-fast's ``prefill``: the prompt through the model (KV caches filled), the first new
    token sampled from the last position's logits; ``[B, 1]`` token ids. ``logits`` "all": the LM
    head (and the vocab gather) over every prompt position, as gpt-fast's ``Transformer.forward``
    returns them and the paper's benchmark runs it; "last": the last position's alone."""
    return sample(forward(model, prompt, input_pos, schedule, comm, logits == "last"), temperature, top_k)
