"""``kernels``: what laddersim charges one layer, kernel by kernel (laddersim.simulation.kernel_view)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from laddersim.api.common import note_unmeasured, profile_of, with_choices
from laddersim.api.params import SCENARIO, ScenarioParams

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model.shape import ModelShape


@with_choices
def kernels(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int,
            batch: int = SCENARIO.batch, schedule: str = "standard", framework: str | Path = SCENARIO.framework,
            prompt_len: int = SCENARIO.prompt_len, gen_len: int = SCENARIO.gen_len, dtype: str = SCENARIO.dtype,
            phase: str = "decode", quant: str = SCENARIO.quant,
            kv_cache_dtype: str = SCENARIO.kv_cache_dtype, ep: int = SCENARIO.ep,
            dp_attention: bool = SCENARIO.dp_attention) -> pd.DataFrame:
    """``laddersim kernels``: what laddersim charges one layer, kernel by kernel, to read beside a
    profiler trace of the same step. One row per kernel of the middle layer of ``schedule``'s
    program on one rank: ``kernel`` (op kind, ``op.part`` within an op), ``class``
    (library_gemm, splitk_reduce, generated, attention, copy, other, collective), ``count`` and
    ``us`` (their device time, microseconds); ``frame.attrs["layer_us"]`` is the layer's
    compute-stream time (collectives excluded).

    ``model``, ``hardware``, ``tp``: as ``simulate``'s. ``batch``: sequences (default 1);
    ``schedule``: standard (default), parallel, ladder, upper_bound, desync_half, hybrid:N;
    ``framework``: a shipped framework ({FRAMEWORKS}; default gpt-fast) or a framework .yaml
    (``laddersim calibrate kernels``); ``prompt_len`` (default 1024) and ``gen_len`` (default 512;
    a static cache holds prompt + generated tokens): tokens per sequence; ``dtype``: {DTYPES}
    (default bfloat16); ``phase``: ``decode`` (default: the first decode step
    after the prompt) or ``prefill``; ``quant``: {QUANTS} (default none: 16-bit linears);
    ``kv_cache_dtype``: {KV_CACHE_DTYPES} (default auto: the dtype's); ``ep``: a mixture-of-experts
    model's expert-parallel ranks in the TP group, and ``dp_attention`` (one GPU of the
    data-parallel-attention layout, its dispatch and combine listed as collectives), as
    ``simulate``'s."""
    from laddersim.simulation.kernel_view import kernel_table

    params = ScenarioParams.pick(locals())
    profile = profile_of(params.hardware)
    frame = kernel_table(params.model, profile, params.tp, params.batch, schedule=schedule, framework=params.framework,
                         prompt_len=params.prompt_len, phase=phase, gen_len=params.gen_len, dtype=params.dtype,
                         quant=params.quant, kv_cache_dtype=params.kv_cache_dtype, ep=params.ep,
                         dp_attention=params.dp_attention)
    note_unmeasured(profile)
    return frame
