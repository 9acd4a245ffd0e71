"""``kernels``: what laddersim charges one layer, kernel by kernel."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.choices import DEFAULT_SCHEDULES
from laddersim.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model_shape import ModelShape


def kernels(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int, batch: int = 1,
            schedule: str = "standard", framework: str | Path = "gpt-fast", prompt_len: int = DEFAULT_PROMPT_LEN,
            gen_len: int = DEFAULT_GEN_LEN, dtype: str = "bfloat16", phase: str = "decode") -> pd.DataFrame:
    """``laddersim kernels``: what laddersim charges one layer, kernel by kernel, to read beside a
    profiler trace of the same step. One row per kernel of the middle layer of ``schedule``'s
    program on one rank: ``kernel`` (op kind, ``op.part`` within an op), ``class``
    (library_gemm, splitk_reduce, generated, attention, copy, other, collective), ``count`` and
    ``us`` (their device time, microseconds); ``frame.attrs["layer_us"]`` is the layer's
    compute-stream time (collectives excluded).

    ``framework``: a shipped framework (gpt-fast, vllm, ...) or a framework .yaml; ``phase``:
    ``decode`` (the first decode step after a ``prompt_len`` prompt) or ``prefill``."""
    from laddersim.kernel_view import kernel_table

    return kernel_table(model, hardware, tp, batch, schedule=schedule, framework=str(framework),
                        prompt_len=prompt_len, phase=phase, gen_len=gen_len, dtype=dtype)

