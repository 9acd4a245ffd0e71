"""The model ``ladder_bench.py`` runs: a Llama-shaped decoder with random weights in the compact
gpt-fast style (pytorch-labs/gpt-fast ``model.py`` + ``tp.py``), one rank's Megatron-style shard,
with each op kind a named function so a profiler trace counts them per kind (``op_trace.py``).

By default it is the model of the Ladder Residual paper's benchmark (the authors' gpt-fast fork,
read from its code: ../shared/docs/ladder-residual.md, "The benchmark, read from its code and
logs"): ``wqkv`` one GEMM; gate and up one GEMM ``w1`` of width 2 x intermediate / TP, split by
``chunk(2)`` before SiLU x up; attention on the math SDPA path only, K and V of the whole static
cache repeated to every query head and a boolean causal mask row over the whole cache, in prefill
and decode alike. ``Variant`` selects the others: ``mlp="split"`` (upstream gpt-fast's two GEMMs
``w1``, ``w3``) and ``sdpa="default"`` (torch's backend choice: FlashAttention, cuDNN, ...).
"""

from __future__ import annotations

import contextlib
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # imported by `python calibration/ladder_bench.py` from a checkout
    sys.path.insert(0, _ROOT)
from laddersim.model.shape import ModelShape  # noqa: E402

ROPE_BASE = 500000.0  # Llama 3 rope_theta
NORM_EPS = 1e-5
MLP_CHOICES = ("fused", "split")
SDPA_CHOICES = ("math", "default")


def add_variant_flags(parser) -> None:
    """``--mlp`` and ``--sdpa``: the model variant a calibration program builds (``Variant``), the
    same choices and defaults in every program (ladder_bench, kernel_trace, ...)."""
    parser.add_argument("--mlp", choices=MLP_CHOICES, default="fused",
                        help="gate and up: one GEMM (the paper's fused w1) or two (upstream gpt-fast's w1, w3)")
    parser.add_argument("--sdpa", choices=SDPA_CHOICES, default="math",
                        help="attention backend in prefill and decode: the math path only (the paper's "
                             "benchmark; Inductor lowers it into generated kernels) or torch's choice "
                             "(FlashAttention, cuDNN, ...)")


@dataclass(frozen=True)
class Variant:
    """How the model computes: ``mlp`` "fused" (gate and up one GEMM, the paper's fork) or "split"
    (two GEMMs, upstream gpt-fast); ``sdpa`` "math" (SDPBackend.MATH only, the paper's fork, in
    prefill and decode) or "default" (torch's choice of attention kernel)."""

    mlp: str = "fused"
    sdpa: str = "math"

    def __post_init__(self):
        if self.mlp not in MLP_CHOICES or self.sdpa not in SDPA_CHOICES:
            raise ValueError(f"Variant: mlp in {MLP_CHOICES}, sdpa in {SDPA_CHOICES}; got {self.mlp}, {self.sdpa}")

    @property
    def suffix(self) -> str:
        """What differs from the paper's model, e.g. ``+split-mlp+default-sdpa`` ("" for the paper's)."""
        return ("+split-mlp" if self.mlp == "split" else "") + ("+default-sdpa" if self.sdpa == "default" else "")


PAPER = Variant()


def attention_backend(sdpa: str):
    """The SDPA backend context of ``sdpa``: the math path only (``torch.nn.attention.sdpa_kernel``,
    which torch.compile traces: Inductor then generates the attention's kernels), or torch's choice."""
    if sdpa == "math":
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:  # torch < 2.3: the context the paper's fork used (deprecated since)
            return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)
        return sdpa_kernel([SDPBackend.MATH])
    return contextlib.nullcontext()


# ---- random weights ------------------------------------------------------------------------
# Every full (unsharded) tensor comes from its own generator seeded by (seed, name), so a rank's
# shard is the same numbers whatever the TP degree, and tests can rebuild the unsharded model.

def _randn(seed: int, name: str, size: Sequence[int], std: float, device, dtype) -> Tensor:
    g = torch.Generator(device=device)
    g.manual_seed(zlib.crc32(f"{seed}:{name}".encode()))
    return torch.randn(*size, generator=g, device=device, dtype=dtype).mul_(std)


def full_layer_weights(shape: ModelShape, layer: int, seed: int, device="cpu",
                       dtype=torch.float32) -> dict[str, Tensor]:
    """Unsharded weights of one decoder layer, nn.Linear layout ``[out_features, in_features]``."""
    d, hd, inter = shape.dim, shape.head_dim, shape.intermediate_size
    q_out, kv_out = shape.n_heads * hd, shape.n_kv_heads * hd

    def w(name, size, std):
        return _randn(seed, f"layers.{layer}.{name}", size, std, device, dtype)

    return {
        "wq": w("wq", (q_out, d), d ** -0.5),
        "wk": w("wk", (kv_out, d), d ** -0.5),
        "wv": w("wv", (kv_out, d), d ** -0.5),
        "wo": w("wo", (d, q_out), q_out ** -0.5),
        "w1": w("w1", (inter, d), d ** -0.5),  # gate
        "w3": w("w3", (inter, d), d ** -0.5),  # up
        "w2": w("w2", (d, inter), inter ** -0.5),  # down
        # Norm weights near 1 but not 1, so a test notices a norm applied in the wrong place.
        "attention_norm": w("attention_norm", (d,), 0.1).add_(1.0),
        "ffn_norm": w("ffn_norm", (d,), 0.1).add_(1.0),
    }


def full_global_weights(shape: ModelShape, seed: int, device="cpu",
                        dtype=torch.float32) -> dict[str, Tensor]:
    """Unsharded embedding, final norm and (untied) LM head."""
    d, v = shape.dim, shape.vocab_size
    return {
        "tok_embeddings": _randn(seed, "tok_embeddings", (v, d), 1.0, device, dtype),
        "norm": _randn(seed, "norm", (d,), 0.1, device, dtype).add_(1.0),
        "output": _randn(seed, "output", (v, d), d ** -0.5, device, dtype),
    }


def kv_heads_of_rank(shape: ModelShape, tp: int, rank: int) -> range:
    """KV heads rank ``rank`` holds: its own slice, or one replica when KV heads < ranks."""
    n = shape.kv_heads_per_rank(tp)
    if shape.n_kv_heads >= tp:
        return range(rank * n, (rank + 1) * n)
    # tp is a multiple of n_kv_heads: ranks [j*tp/n_kv, (j+1)*tp/n_kv) serve the query heads
    # that share KV head j (query head h uses KV head h // (n_heads / n_kv_heads)).
    head = rank // (tp // shape.n_kv_heads)
    return range(head, head + 1)


# ---- model (one rank's shard) --------------------------------------------------------------

def rms_norm(x: Tensor, weight: Tensor, eps: float = NORM_EPS) -> Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


# The norms under the op kinds' names (see TransformerBlock.attention): four program ops.
def attn_norm(x: Tensor, weight: Tensor) -> Tensor:
    return rms_norm(x, weight)


def mlp_norm(x: Tensor, weight: Tensor) -> Tensor:
    return rms_norm(x, weight)


def norm(x: Tensor, weight: Tensor) -> Tensor:
    return rms_norm(x, weight)


def final_norm(x: Tensor, weight: Tensor) -> Tensor:
    return rms_norm(x, weight)


def precompute_freqs_cis(seq_len: int, head_dim: int, base: float = ROPE_BASE) -> Tensor:
    """gpt-fast's RoPE table: ``[seq_len, head_dim // 2, 2]`` holding (cos, sin)."""
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(seq_len).float(), freqs)
    return torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)


def apply_rotary_emb(x: Tensor, freqs_cis: Tensor) -> Tensor:
    """Rotate consecutive pairs of ``x [B, S, H, head_dim]`` by ``freqs_cis [S, head_dim//2, 2]``."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    fc = freqs_cis.view(1, xs.size(1), 1, xs.size(3), 2)
    out = torch.stack([
        xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1],
        xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1],
    ], dim=-1)
    return out.flatten(3).type_as(x)


class TransformerBlock(nn.Module):
    """One layer's shard. ``w_in`` stacks column-parallel ``wqkv``, the gate rows and the up rows,
    so the parallel schedule can run them as one matmul; the others use row-slice views of it:
    ``w13`` (gate and up: the paper's fused ``w1``), or ``w1`` and ``w3`` apart (``mlp="split"``)."""

    def __init__(self, shape: ModelShape, tp: int, batch: int, max_seq: int, device, dtype,
                 variant: Variant = PAPER):
        super().__init__()
        self.fused_mlp = variant.mlp == "fused"
        self.sdpa = variant.sdpa
        self.n_head = shape.heads_per_rank(tp)
        self.n_local_heads = shape.kv_heads_per_rank(tp)
        self.head_dim = shape.head_dim
        self.n_qkv = (self.n_head + 2 * self.n_local_heads) * self.head_dim
        self.n_ff = shape.intermediate_per_rank(tp)
        kw = {"device": device, "dtype": dtype}
        d = shape.dim
        self.register_buffer("w_in", torch.empty(self.n_qkv + 2 * self.n_ff, d, **kw), False)
        self.register_buffer("wo", torch.empty(d, self.n_head * self.head_dim, **kw), False)
        self.register_buffer("w2", torch.empty(d, self.n_ff, **kw), False)
        self.register_buffer("attention_norm", torch.empty(d, **kw), False)
        self.register_buffer("ffn_norm", torch.empty(d, **kw), False)
        cache = (batch, self.n_local_heads, max_seq, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(cache, **kw), False)
        self.register_buffer("v_cache", torch.zeros(cache, **kw), False)

    @property
    def wqkv(self) -> Tensor:
        return self.w_in[: self.n_qkv]

    @property
    def w1(self) -> Tensor:
        return self.w_in[self.n_qkv: self.n_qkv + self.n_ff]

    @property
    def w3(self) -> Tensor:
        return self.w_in[self.n_qkv + self.n_ff:]

    @property
    def w13(self) -> Tensor:
        """Gate and up as one weight ``[2 * n_ff, dim]`` (the paper's fused ``w1``)."""
        return self.w_in[self.n_qkv:]

    # Each step below is one function named after the op kind of laddersim's op program it is
    # (laddersim.schedules.program.MODULE_OPS), so a profiler trace attributes every framework op
    # to its kind by the innermost frame (calibration/op_trace.py); a call costs ~0.1 us.

    def attention(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor) -> Tensor:
        """This rank's partial sum of the attention output (row-parallel ``wo``, not reduced)."""
        return self._attend(self.qkv(x), freqs_cis, mask, input_pos)

    def feed_forward(self, x: Tensor) -> Tensor:
        """This rank's partial sum of the SwiGLU MLP output (row-parallel ``w2``, not reduced)."""
        return self.down(self.act(*self.gate_up(x)))

    def fused(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor) -> Tensor:
        """GPT-J/PaLM parallel block: attention + MLP partial sums from one input matmul."""
        qkv, gate, up = self.qkv_gate_up(x)
        bsz, seqlen, _ = qkv.shape
        y = self.attention_core(self.rope(qkv, freqs_cis, input_pos), mask)
        h = self.act(gate, up)  # before the projections, in the op program's order
        return partial_add(self.o_proj(y.transpose(1, 2).reshape(bsz, seqlen, -1)), self.down(h))

    def qkv(self, x: Tensor) -> Tensor:
        return F.linear(x, self.wqkv)

    def gate_up(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if self.fused_mlp:  # one GEMM, then chunk(2): gate, up (the paper's fork)
            return F.linear(x, self.w13).chunk(2, dim=-1)
        return F.linear(x, self.w1), F.linear(x, self.w3)

    def qkv_gate_up(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return F.linear(x, self.w_in).split([self.n_qkv, self.n_ff, self.n_ff], dim=-1)

    @staticmethod
    def act(gate: Tensor, up: Tensor) -> Tensor:
        return F.silu(gate) * up

    def down(self, h: Tensor) -> Tensor:
        return F.linear(h, self.w2)

    def _attend(self, qkv: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor) -> Tensor:
        bsz, seqlen, _ = qkv.shape
        y = self.attention_core(self.rope(qkv, freqs_cis, input_pos), mask)
        return self.o_proj(y.transpose(1, 2).reshape(bsz, seqlen, -1))

    def rope(self, qkv: Tensor, freqs_cis: Tensor, input_pos: Tensor) -> Tensor:
        """Rotated queries ``[B, H, S, hd]``; the rotated keys and the values go into the cache."""
        bsz, seqlen, _ = qkv.shape
        kv_size = self.n_local_heads * self.head_dim
        q, k, v = qkv.split([self.n_head * self.head_dim, kv_size, kv_size], dim=-1)
        q = apply_rotary_emb(q.view(bsz, seqlen, self.n_head, self.head_dim), freqs_cis)
        k = apply_rotary_emb(k.view(bsz, seqlen, self.n_local_heads, self.head_dim), freqs_cis)
        v = v.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        self.k_cache[:, :, input_pos] = k.transpose(1, 2)  # gpt-fast KVCache.update: index_put
        self.v_cache[:, :, input_pos] = v.transpose(1, 2)
        return q.transpose(1, 2)

    def attention_core(self, q: Tensor, mask: Tensor) -> Tensor:
        """SDPA over the whole static cache, K and V repeated to every query head (gpt-fast's
        ``repeat_interleave``), ``mask`` the boolean causal rows of this pass over the whole cache."""
        rep = self.n_head // self.n_local_heads
        k = self.k_cache.repeat_interleave(rep, dim=1)
        v = self.v_cache.repeat_interleave(rep, dim=1)
        with attention_backend(self.sdpa):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def o_proj(self, y: Tensor) -> Tensor:
        return F.linear(y, self.wo)


def residual_add(x: Tensor, y: Tensor) -> Tensor:
    return x + y


def partial_add(x: Tensor, y: Tensor) -> Tensor:
    return x + y


class Transformer(nn.Module):
    """One rank's shard of the decoder: replicated embedding, vocab-parallel LM head."""

    def __init__(self, shape: ModelShape, tp: int, batch: int, max_seq: int, device, dtype,
                 variant: Variant = PAPER):
        super().__init__()
        self.shape, self.tp, self.max_seq, self.variant = shape, tp, max_seq, variant
        kw = {"device": device, "dtype": dtype}
        d = shape.dim
        self.register_buffer("tok_embeddings", torch.empty(shape.vocab_size, d, **kw), False)
        self.layers = nn.ModuleList(
            TransformerBlock(shape, tp, batch, max_seq, device, dtype, variant) for _ in range(shape.n_layers)
        )
        self.register_buffer("norm", torch.empty(d, **kw), False)
        self.register_buffer("output", torch.empty(shape.vocab_per_rank(tp), d, **kw), False)
        self.register_buffer(
            "freqs_cis", precompute_freqs_cis(max_seq, shape.head_dim).to(device=device, dtype=dtype), False
        )
        self.register_buffer(
            "causal_mask", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool, device=device)), False
        )


@torch.no_grad()
def build_model(shape: ModelShape, rank: int, tp: int, batch: int, max_seq: int, seed: int,
                device="cpu", dtype=torch.float32, variant: Variant = PAPER) -> Transformer:
    """Allocate rank ``rank``'s shard and fill it, one layer of full weights at a time
    (column-parallel wqkv/w1/w3 split by rows, row-parallel wo/w2 by columns, as Megatron). The
    numbers are the same for every ``variant``: only how they are multiplied differs."""
    model = Transformer(shape, tp, batch, max_seq, device, dtype, variant)
    hd, nh = shape.head_dim, shape.heads_per_rank(tp)
    q_rows = slice(rank * nh * hd, (rank + 1) * nh * hd)
    kv = kv_heads_of_rank(shape, tp, rank)
    kv_rows = slice(kv.start * hd, kv.stop * hd)
    nff = shape.intermediate_per_rank(tp)
    ff_rows = slice(rank * nff, (rank + 1) * nff)
    for i, block in enumerate(model.layers):
        w = full_layer_weights(shape, i, seed, device, dtype)
        block.w_in.copy_(torch.cat([w["wq"][q_rows], w["wk"][kv_rows], w["wv"][kv_rows],
                                    w["w1"][ff_rows], w["w3"][ff_rows]]))
        block.wo.copy_(w["wo"][:, q_rows])
        block.w2.copy_(w["w2"][:, ff_rows])
        block.attention_norm.copy_(w["attention_norm"])
        block.ffn_norm.copy_(w["ffn_norm"])
        del w
    g = full_global_weights(shape, seed, device, dtype)
    model.tok_embeddings.copy_(g["tok_embeddings"])
    model.norm.copy_(g["norm"])
    vpr = shape.vocab_per_rank(tp)
    shard = g["output"][rank * vpr: (rank + 1) * vpr]  # the last shard may be short: pad with 0
    model.output.zero_()
    model.output[: shard.shape[0]].copy_(shard)
    return model
