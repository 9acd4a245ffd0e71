"""The files ``laddersim validate`` writes for measured tables of other engines (static batches,
``validation.static_external``; closed loops, ``validation.closed_loop``): per table, its scored
rows with the predictions and errors, the rows skipped with why, and the error summary, as CSV for
the user's other tools. Each file is written whole or not at all; the same scores give the same
bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from laddersim.measure.atomic import replace_file
from laddersim.support.io_write import make_dir

PARTS = ("rows", "skipped", "summary")  # the frames of a score written, each as <table>_<part>.csv


def score_files(paths: Sequence[str | Path]) -> list[str]:
    """One file stem per table: its file name's stem, numbered where two tables share it."""
    stems = [Path(p).stem for p in paths]
    return [stem if stems.count(stem) == 1 else f"{stem}_{i + 1}" for i, stem in enumerate(stems)]


def frame_csv(frame: pd.DataFrame) -> str:
    """A frame as CSV text: no index, 6 significant digits, Unix line ends."""
    return frame.to_csv(index=False, float_format="%.6g", lineterminator="\n")


def write_scores(paths: Sequence[str | Path], scores: Sequence, out_dir: str | Path) -> Path:
    """Every score's PARTS under ``out_dir`` (made if missing; a path that cannot be written is one
    line naming ``--report``); returns the folder."""
    folder = make_dir(out_dir, "report")
    for stem, score in zip(score_files(paths), scores):
        for part in PARTS:
            replace_file(folder / f"{stem}_{part}.csv", frame_csv(getattr(score, part)))
    return folder
