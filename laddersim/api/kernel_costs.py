"""``kernels``: what laddersim charges one layer, kernel by kernel (laddersim.simulation.kernel_view)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from laddersim.api.common import note_unmeasured, profile_of
from laddersim.support.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model.shape import ModelShape


def kernels(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int, batch: int = 1,
            schedule: str = "standard", framework: str | Path = "gpt-fast", prompt_len: int = DEFAULT_PROMPT_LEN,
            gen_len: int = DEFAULT_GEN_LEN, dtype: str = "bfloat16", phase: str = "decode") -> pd.DataFrame:
    """``laddersim kernels``: what laddersim charges one layer, kernel by kernel, to read beside a
    profiler trace of the same step. One row per kernel of the middle layer of ``schedule``'s
    program on one rank: ``kernel`` (op kind, ``op.part`` within an op), ``class``
    (library_gemm, splitk_reduce, generated, attention, copy, other, collective), ``count`` and
    ``us`` (their device time, microseconds); ``frame.attrs["layer_us"]`` is the layer's
    compute-stream time (collectives excluded).

    ``model``, ``hardware``, ``tp``: as ``simulate``'s. ``batch``: sequences (default 1);
    ``schedule``: standard (default), parallel, ladder, upper_bound, desync_half, hybrid:N;
    ``framework``: a shipped framework (gpt-fast, the default; gpt-fast-flash, vllm) or a framework
    .yaml (``laddersim calibrate kernels``); ``prompt_len`` (default 1024) and ``gen_len`` (default
    512; a static cache holds prompt + generated tokens): tokens per sequence; ``dtype``: bfloat16
    (default), float16, float32 or fp8; ``phase``: ``decode`` (default: the first decode step
    after the prompt) or ``prefill``."""
    from laddersim.simulation.kernel_view import kernel_table

    profile = profile_of(hardware)
    frame = kernel_table(model, profile, tp, batch, schedule=schedule, framework=str(framework),
                         prompt_len=prompt_len, phase=phase, gen_len=gen_len, dtype=dtype)
    note_unmeasured(profile)
    return frame
