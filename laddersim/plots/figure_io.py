"""Writing figures: PNG and SVG, byte-identical for identical inputs.

Determinism needs four things: the Agg backend (no display, no GUI state), a fixed
``svg.hashsalt`` (matplotlib otherwise salts SVG element ids with a random uuid), no date or
software-version metadata in either file, and SVG ids that do not hash full-precision floats:
matplotlib names a clip path after its rectangle's coordinates, so a layout that moves by 1e-7
px (less than the 6 decimals the file prints) would rename every clip path of a figure.
``_renumber_svg_ids`` names them (and markers, hatches) by order of first appearance instead.
"""

from __future__ import annotations

import io
import re
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from laddersim.errors import UserInputError  # noqa: E402

# Applied around every figure (rc_context), never globally, so importing laddersim changes nothing.
STYLE = {
    "svg.hashsalt": "laddersim",
    "svg.fonttype": "path",  # text as paths: the SVG renders the same without the font installed
    "figure.dpi": 100,
    "savefig.dpi": 120,
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8,
    "legend.frameon": False,
}

_METADATA = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
}

# One colour per schedule, the same in every plot (matplotlib tab10 entries).
SCHEDULE_COLORS = {
    "standard": "#1f77b4",
    "ladder": "#d62728",
    "parallel": "#2ca02c",
    "upper_bound": "#7f7f7f",
    "desync_half": "#9467bd",
}


def schedule_color(schedule: str, fallback_index: int = 0) -> str:
    """Colour of a schedule; unlisted ones (e.g. hybrid:N) cycle through the rest of tab10."""
    if schedule in SCHEDULE_COLORS:
        return SCHEDULE_COLORS[schedule]
    extra = ["#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]
    return extra[fallback_index % len(extra)]


@contextmanager
def styled():
    """Build a figure inside this: rc settings apply when artists are created, not when saved."""
    with matplotlib.rc_context(STYLE):
        yield


def new_figure(n_panels: int, *, panel_w_in: float = 4.2, panel_h_in: float = 3.2, max_cols: int = 3,
               sharey: bool = False):
    """A figure with ``n_panels`` axes in a grid; returns (figure, flat list of the used axes)."""
    cols = min(max_cols, n_panels)
    rows = -(-n_panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(panel_w_in * cols, panel_h_in * rows),
                             squeeze=False, sharey=sharey, layout="constrained")
    flat = list(axes.ravel())
    for ax in flat[n_panels:]:
        ax.set_visible(False)
    return fig, flat[:n_panels]


def save_figure(fig, out_base: str | Path) -> list[Path]:
    """Write ``<out_base>.png`` and ``<out_base>.svg``, close the figure, return both paths."""
    base = Path(out_base)
    if base.suffix.lower() in (".png", ".svg"):
        base = base.with_suffix("")
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        plt.close(fig)
        raise UserInputError(f"out: cannot create {base.parent}: {exc.strerror}") from None
    paths = []
    try:
        with matplotlib.rc_context(STYLE):
            for ext in ("png", "svg"):
                path = base.with_name(base.name + "." + ext)
                write_figure_file(fig, path, bbox_inches="tight")
                paths.append(path)
    except OSError as exc:
        raise UserInputError(f"out: cannot write {base}: {exc.strerror}") from None
    finally:
        plt.close(fig)
    return paths


def write_figure_file(fig, path: str | Path, **savefig_kw) -> None:
    """``fig.savefig`` to ``path`` (PNG or SVG by its suffix) with no date or software metadata
    and, in an SVG, ids numbered in document order (``_renumber_svg_ids``): the same drawing
    gives the same bytes. Every figure file laddersim writes goes through here."""
    path = Path(path)
    ext = path.suffix.lower().lstrip(".")
    if ext != "svg":
        fig.savefig(path, format=ext, metadata=_METADATA.get(ext, {}), **savefig_kw)
        return
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": STYLE["svg.hashsalt"]}):
        fig.savefig(buffer, format="svg", metadata=_METADATA["svg"], **savefig_kw)
    path.write_text(_renumber_svg_ids(buffer.getvalue()), encoding="utf-8")


# matplotlib's hashed SVG ids: clip paths (p), markers (m), hatches (h), 10 hex digits each.
_HASHED_ID = re.compile(r'id="([pmh])([0-9a-f]{10})"')


def _renumber_svg_ids(svg: str) -> str:
    """``svg`` with each hashed id (and every reference to it) renamed ``<kind>-<n>``, n counting
    the ids of that kind in document order: the same drawing gives the same bytes."""
    names: dict[str, str] = {}
    counts: dict[str, int] = {}
    for kind, digest in _HASHED_ID.findall(svg):
        if kind + digest not in names:
            names[kind + digest] = f"{kind}-{counts.setdefault(kind, 0)}"
            counts[kind] += 1
    if not names:
        return svg
    used = re.compile(r'(?<=[#"])(' + "|".join(names) + r')(?=[")])')  # an id="..." or a #reference
    return used.sub(lambda m: names[m.group(1)], svg)
