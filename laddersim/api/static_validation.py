"""``validate`` of static-batch tables measured on other engines and GPUs (``laddersim.validation.
static_external``): each row's engine mapped to a framework and its GPU to a shipped profile, the
16-bit rows scored on tokens/s, TTFT and TPOT per GPU x engine group."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from laddersim.api.common import listed
from laddersim.validation.static_external import StaticScore, is_static_table  # noqa: F401


def validate_static(measured: str | Path | Sequence[str | Path], models: str | Path | None = None,
                    allreduce: str | None = None, *, progress: bool = False) -> list[StaticScore]:
    """One ``StaticScore`` per table of ``measured`` (rows scored, rows skipped with the reason,
    the summary per GPU x engine and the engine -> framework, GPU -> profile mapping used);
    ``models``: the folder of <name>.json configs the tables' model column names (default
    ``models/`` beside each); ``allreduce``: an AllReduce implementation forced over every
    framework's rule (one line where a row's machine or dtype cannot run it)."""
    from laddersim.errors import UserInputError
    from laddersim.validation.static_external import score_static

    if models is not None and not Path(models).is_dir():
        raise UserInputError(f"models: {models} is not a folder; allowed: a folder of <name>.json model configs")
    scores = []
    for path in listed(measured):
        if progress:
            print(f"scoring {path} ...", file=sys.stderr)
        scores.append(score_static(path, models, allreduce))
    return scores
