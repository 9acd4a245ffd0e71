"""The model's own decode modules on one rank, as callables: what a decode step computes between
two AllReduces (the attention of a layer, or its MLP), for the benchmarks that run the model's
compute beside collectives (``interference``, ``skew``, ``allreduce``'s step chain). The
model is ``ladder_model``'s (the paper's benchmark model by default), random weights."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from calibration import ladder_model as lmodel  # noqa: E402
from calibration.bench_timing import DTYPES  # noqa: E402

_MODELS: dict = {}  # (model, tp, batch, dtype, rank) -> the built shard, shared by the points
MODULE_LAYERS = 4  # layers built: what runs between two AllReduces is one module of one of them
DECODE_POS = 64  # the position decoded (KV cache length)


def _random_shard(shape, tp: int, batch: int, device, dtype):
    """(shard, input position, dim): a rank's shard of at most MODULE_LAYERS layers with random
    weights (values do not change a module's time), without the embedding and LM head."""
    shape = shape.model_copy(update={"n_layers": min(shape.n_layers, MODULE_LAYERS), "vocab_size": tp})
    built = lmodel.Transformer(shape, tp, batch, 2 * DECODE_POS, device, dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    for name, buf in built.named_buffers():
        if name.endswith("norm"):
            buf.fill_(1.0)
        elif buf.is_floating_point() and "freqs_cis" not in name:
            buf.normal_(0.0, buf.shape[-1] ** -0.5 if buf.dim() > 1 else 1.0, generator=gen)
    return built, torch.tensor([DECODE_POS], device=device), shape.dim


def decode_modules(ctx, model: str, tp: int, batch: int, dtype: str):
    """The model's own modules (ladder_bench's, this rank's shard) on ``batch`` tokens of decode,
    one callable each in a step's order (attention of layer 0, its MLP, attention of layer 1, ...):
    what a step computes between two AllReduces. Callers cycle over them, so each module finds
    its weights where a step finds them."""
    from laddersim.model.shape import load_model_shape

    key = (model, tp, batch, dtype, ctx.rank)
    if key not in _MODELS:
        _MODELS.clear()
        _MODELS[key] = _random_shard(load_model_shape(model), tp, batch, ctx.device, DTYPES[dtype])
    built, input_pos, dim = _MODELS[key]
    x = torch.randn(batch, 1, dim, dtype=DTYPES[dtype], device=ctx.device)
    rope = (built.freqs_cis[input_pos], built.causal_mask[None, None, input_pos], input_pos)

    def module(i: int):
        layer = built.layers[i // 2]

        @torch.no_grad()
        def run():
            if i % 2 == 0:
                return layer.attention(lmodel.attn_norm(x, layer.attention_norm), *rope)
            return layer.feed_forward(lmodel.mlp_norm(x, layer.ffn_norm))
        return run
    return [module(i) for i in range(2 * len(built.layers))]
