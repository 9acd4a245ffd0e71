"""Speedup of a schedule over standard against interconnect bandwidth or latency (what-if sweeps).

One panel per model (and hardware), one line per TP degree and batch size. The x column is the
override that the sweep varied: a scale of the profile's value or an absolute value.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullLocator

from laddersim.errors import UserInputError
from laddersim.plots.figure_io import new_figure, save_figure, styled
from laddersim.plots.frames import (
    groups,
    input_columns,
    label,
    number_text,
    ok_rows,
    panel_title,
    titled,
    varying,
    with_speedup,
)
from laddersim.sweeps.grid import OVERRIDE_COLUMNS

BANDWIDTH_COLUMNS = (
    "intra_bandwidth_scale", "intra_bandwidth_gbps", "inter_bandwidth_scale", "inter_bandwidth_gbps",
    "nics_per_node",
)
LATENCY_COLUMNS = ("intra_latency_scale", "intra_latency_us", "inter_latency_scale", "inter_latency_us")

# Columns that can go on the x axis: numeric inputs of a scenario (a sweep's axes and its what-if
# overrides). Text columns (model, schedule) cannot be ordered, and results (tokens_per_s,
# speedup) are what the y axis shows, not something a sweep sets.
X_COLUMNS = ("tp", "batch", "prompt_len", "gen_len", *OVERRIDE_COLUMNS)

AXIS_LABELS = {
    "tp": "TP degree (GPUs)",
    "batch": "batch size (sequences)",
    "prompt_len": "prompt length (tokens)",
    "gen_len": "generated tokens",
    "intra_bandwidth_scale": "intra-node bandwidth (x the profile's)",
    "intra_bandwidth_gbps": "intra-node AllReduce bus bandwidth (GB/s)",
    "inter_bandwidth_scale": "inter-node bandwidth (x the profile's)",
    "inter_bandwidth_gbps": "inter-node AllReduce bus bandwidth (GB/s)",
    "nics_per_node": "NICs per node",
    "intra_latency_scale": "intra-node latency (x the profile's)",
    "intra_latency_us": "intra-node AllReduce latency (us)",
    "inter_latency_scale": "inter-node latency (x the profile's)",
    "inter_latency_us": "inter-node AllReduce latency (us)",
}

_PANEL_COLUMNS = ["model", "hardware"]
_MARKERS = "osD^vP*X"
_DASHES = ["-", "--", ":", "-."]
# At most this many x values are each a tick (the values the sweep set); more get a plain-number axis.
_MAX_VALUE_TICKS = 12
# At most this many lines get a legend entry each below the panels in up to 4 columns; more (e.g.
# --x tp over a sweep of batches and bandwidths: 20 lines) get at most _LEGEND_ROWS rows, an entry
# per colour and per dash pattern where two keys vary, so the legend never outgrows the panels.
_MAX_LEGEND_LINES = 8
_LEGEND_ROWS = 3


def plot_bandwidth(frame: pd.DataFrame, out_base: str | Path, *, x: str | None = None,
                   schedule: str = "ladder", title: str | None = None) -> list[Path]:
    """Speedup (x) of ``schedule`` over standard vs a bandwidth column; writes PNG and SVG."""
    x = x or _pick_x(frame, BANDWIDTH_COLUMNS, "bandwidth")
    return _plot_link(frame, out_base, x, schedule,
                      title or _default_title(x, BANDWIDTH_COLUMNS, "Speedup vs interconnect bandwidth"))


def plot_latency(frame: pd.DataFrame, out_base: str | Path, *, x: str | None = None,
                 schedule: str = "ladder", title: str | None = None) -> list[Path]:
    """Speedup (x) of ``schedule`` over standard vs a latency column; writes PNG and SVG."""
    x = x or _pick_x(frame, LATENCY_COLUMNS, "latency")
    return _plot_link(frame, out_base, x, schedule,
                      title or _default_title(x, LATENCY_COLUMNS, "Speedup vs interconnect latency"))


def _default_title(x: str, kind_columns: tuple[str, ...], kind_title: str) -> str:
    """The kind's title when x is one of its columns, else one naming what --x put on the axis."""
    return kind_title if x in kind_columns else f"Speedup vs {AXIS_LABELS.get(x, x)}"


def _pick_x(frame: pd.DataFrame, candidates: tuple[str, ...], what: str) -> str:
    """The first candidate column that varies; else the first present."""
    present = [c for c in candidates if c in frame.columns and frame[c].notna().any()]
    if not present:
        raise UserInputError(f"results: no {what} column with values to plot against ({', '.join(candidates)}); "
                             f"pick another with --x")
    moving = varying(frame, present)
    return (moving or present)[0]


def check_x(frame: pd.DataFrame, x: str) -> None:
    """Refuse an x column that is not a numeric input with values in ``frame`` (one line, naming
    the columns that are allowed)."""
    allowed = [c for c in X_COLUMNS if c in frame.columns and pd.to_numeric(frame[c], errors="coerce").notna().any()]
    if x in allowed:
        return
    listed = ", ".join(allowed) or "none in this table"
    if x not in frame.columns:
        raise UserInputError(f"x: no column '{x}' in the results; allowed: {listed}")
    if x in X_COLUMNS:
        raise UserInputError(f"x: column '{x}' has no values in the results; allowed: {listed}")
    raise UserInputError(f"x: '{x}' is not a numeric input column to plot against; allowed: {listed}")


def _dash_keys(rows: pd.DataFrame, line_keys: list[str]) -> list[str]:
    """The line key drawn as the dash pattern: TP where it varies beside something else; with
    more lines than a legend lists one by one, the key with fewest values (if the dashes tell
    them apart), so the legend can name colours and dashes apart. Else none."""
    if len(line_keys) < 2:
        return []
    if "tp" in line_keys:
        return ["tp"]
    if len(groups(rows, line_keys)) <= _MAX_LEGEND_LINES:
        return []
    fewest = min(line_keys, key=lambda k: rows[k].nunique(dropna=False))
    return [fewest] if rows[fewest].nunique(dropna=False) <= len(_DASHES) else []


def _line_styles(rows: pd.DataFrame, line_keys: list[str]) -> dict[tuple, dict]:
    """Matplotlib style of each line (by its values of ``line_keys``), the same in every panel:
    with TP and something else varying, the TP degree is the dash pattern and the rest the colour
    and marker (TP 4 solid, TP 8 dashed), so a reader sorts the lines at a glance (``_dash_keys``)."""
    by_dash = _dash_keys(rows, line_keys)
    by_colour = [k for k in line_keys if k not in by_dash]
    dashes = {_key(v, by_dash): i for i, (v, _) in enumerate(groups(rows, by_dash))} if by_dash else {}
    colours = {_key(v, by_colour): i for i, (v, _) in enumerate(groups(rows, by_colour))}
    styles = {}
    for values, _ in groups(rows, line_keys):
        colour = colours[_key(values, by_colour)]
        dash = dashes[_key(values, by_dash)] if by_dash else colour // len(_MARKERS)
        styles[_key(values, line_keys)] = {"color": f"C{colour % 10}", "marker": _MARKERS[colour % len(_MARKERS)],
                                           "linestyle": _DASHES[dash % len(_DASHES)]}
    return styles


def _legend(fig, rows: pd.DataFrame, line_keys: list[str], styles: dict, lines: dict[str, object]) -> None:
    """One legend for every panel, below them, not over the curves: an entry per line; past
    ``_MAX_LEGEND_LINES`` lines in at most ``_LEGEND_ROWS`` rows (wider, not taller than the
    panels), an entry per colour and per dash pattern (``_dash_keys``), or per line when one key
    alone varies."""
    if len(lines) <= _MAX_LEGEND_LINES:
        fig.legend(list(lines.values()), list(lines), loc="outside lower center", ncol=min(4, len(lines)))
        return
    by_dash = _dash_keys(rows, line_keys)
    if not by_dash:
        fig.legend(list(lines.values()), list(lines), loc="outside lower center", ncol=-(-len(lines) // _LEGEND_ROWS))
        return
    by_colour = [k for k in line_keys if k not in by_dash]
    entries: dict[str, Line2D] = {}
    for keys, grey in ((by_colour, False), (by_dash, True)):
        for values, part in groups(rows, keys):
            first = next(iter(groups(part, line_keys)))[0]
            style = styles[_key(first, line_keys)]
            entries[label(values)] = Line2D([], [], color="grey" if grey else style["color"],
                                            marker=None if grey else style["marker"], markersize=4,
                                            linestyle=style["linestyle"] if grey else "-")
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncol=-(-len(entries) // _LEGEND_ROWS))


def _key(values: dict, keys: list[str]) -> tuple:
    """``values`` of ``keys`` as a dictionary key (NaN, an unset override, as None: it equals itself)."""
    return tuple(None if pd.isna(values[k]) else values[k] for k in keys)


def value_ticks(ax, values) -> None:
    """Ticks at the values a sweep set, written as numbers (50, 100, 225, not 2^6); a log axis
    keeps its spacing. Too many values: a plain-number axis."""
    values = sorted(v for v in values if pd.notna(v))
    if 0 < len(values) <= _MAX_VALUE_TICKS:
        ax.set_xticks(values, [number_text(float(v)) for v in values])
    else:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: number_text(float(v))))
    ax.xaxis.set_minor_locator(NullLocator())


def _plot_link(frame: pd.DataFrame, out_base, x: str, schedule: str, title: str) -> list[Path]:
    check_x(frame, x)
    frame = with_speedup(ok_rows(frame, "speedup-vs-link", ["schedule", "tokens_per_s", x]))
    rows = frame[frame["schedule"] == schedule].dropna(subset=["speedup_vs_standard"])
    if rows.empty:
        have = ", ".join(sorted(frame["schedule"].astype(str).unique()))
        raise UserInputError(f"schedule: no '{schedule}' rows with a standard baseline; allowed: {have}")
    others = [c for c in input_columns(rows) if c != x]
    panel_keys = varying(rows, _PANEL_COLUMNS)
    line_keys = varying(rows, [c for c in others if c not in _PANEL_COLUMNS])
    panels = groups(rows, panel_keys)
    styles = _line_styles(rows, line_keys)
    scale_axis = x.endswith("_scale")
    with styled():
        fig, axes = new_figure(len(panels), sharey=True)
        legend: dict[str, object] = {}
        for ax, (selector, panel) in zip(axes, panels):
            for line_selector, line in groups(panel, line_keys):
                line = line.groupby(x, as_index=False)["speedup_vs_standard"].mean().sort_values(x)
                name = label(line_selector) or schedule
                (handle,) = ax.plot(line[x], line["speedup_vs_standard"], markersize=4, label=name,
                                    **styles[_key(line_selector, line_keys)])
                legend.setdefault(name, handle)
            ax.axhline(1.0, color="black", linewidth=0.8)
            if scale_axis:
                ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
            if (panel[x] > 0).all():
                ax.set_xscale("log", base=2)
            value_ticks(ax, panel[x].unique())
            ax.set_xlabel(AXIS_LABELS.get(x, x))
            ax.set_ylabel(f"{schedule} speedup\nover standard (x)")  # one line overruns the panel's height
            ax.set_title(panel_title(selector, 3.6))  # empty with one panel: the figure title says it
        _legend(fig, rows, line_keys, styles, legend)
        fig.suptitle(titled(title, rows, panel_keys + line_keys + [x]))
        return save_figure(fig, out_base)
