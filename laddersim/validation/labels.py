"""How validation rows are named and grouped: a model's label, a setting's label, the setting
columns in which rows differ, and the model x P2P x framework group of every row. No plotting:
the figure and the error tables both import from here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from laddersim.model.shape import config_file_name

# The setting columns a figure panel or a trend holds fixed besides TP, batch and P2P.
OTHER_SETTING = ["model", "framework", "pp", "ep", "prompt_len", "gen_len", "dtype"]
# The column naming each row's model x P2P x framework group (the groups validate reports errors by).
MODEL_P2P = "model_p2p"


def model_label(model: str) -> str:
    """A preset's name, or a config file's (``laddersim.model.shape.config_file_name``)."""
    return config_file_name(model) if Path(str(model)).suffix == ".json" else str(model)


def setting_label(column: str, value) -> str:
    """How a setting column's value is named in a panel title or a trend check."""
    if column == "model":
        return model_label(value)
    return {"batch": "batch {}", "pp": "pp {}", "prompt_len": "prompt {}", "gen_len": "gen {}"}.get(column, "{}").format(value)


def setting_columns(frame: pd.DataFrame) -> list[str]:
    """The setting columns besides TP, batch and P2P in which the rows differ (worth a panel, a
    trend group and a column of their own): ``hardware`` when rows of one P2P setting name
    different profiles (P2P on and off rows map to their own profiles anyway), then those of
    ``OTHER_SETTING`` that take more than one value."""
    hardware = "hardware" in frame.columns and any(
        part["hardware"].nunique() > 1 for _, part in frame.groupby("p2p"))
    return (["hardware"] if hardware else []) + [c for c in OTHER_SETTING if c in frame.columns and frame[c].nunique() > 1]


def group_label(model: str, p2p: str, framework: str | None = None) -> str:
    """``<model> p2p=<on|off>`` and, where the rows name one, `` <framework>``."""
    label = f"{model_label(model)} p2p={p2p}"
    return label if framework is None or pd.isna(framework) or not str(framework) else f"{label} {framework}"


def with_model_p2p(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with a ``model_p2p`` column: model x P2P setting x framework (where the rows carry one)."""
    frameworks = frame["framework"] if "framework" in frame.columns else [None] * len(frame)
    return frame.assign(**{MODEL_P2P: [group_label(m, p, f) for m, p, f in zip(frame["model"], frame["p2p"], frameworks)]})
