"""Markdown pieces for the report: sections and tables with explicit number formats."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass(frozen=True)
class Section:
    """One section of the report: a title, its Markdown body, and the figures it wrote."""

    title: str
    body: str
    figures: list[Path] = field(default_factory=list)


def table(frame: pd.DataFrame, formats: dict[str, str] | None = None, headers: dict[str, str] | None = None) -> str:
    """A Markdown table; ``formats`` maps column -> format spec ("{:.2f}"); NaN prints as "-"."""
    formats = formats or {}
    headers = headers or {}
    columns = list(frame.columns)

    def cell(column, value) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return "-"
        if column in formats:
            return formats[column].format(value)
        return str(value)

    lines = ["| " + " | ".join(headers.get(c, c) for c in columns) + " |",
             "| " + " | ".join("---:" if pd.api.types.is_numeric_dtype(frame[c]) else "---" for c in columns) + " |"]
    for row in frame.itertuples(index=False, name=None):
        lines.append("| " + " | ".join(cell(c, v) for c, v in zip(columns, row)) + " |")
    return "\n".join(lines)


def figure_link(path: Path, out_dir: Path, alt: str) -> str:
    """An image link relative to the report directory, plus a link to the SVG beside the PNG."""
    rel = path.relative_to(out_dir).as_posix()
    svg = rel[: -len(".png")] + ".svg" if rel.endswith(".png") else None
    return f"![{alt}]({rel})" + (f"  \n([SVG]({svg}))" if svg else "")


def code(lines: list[str]) -> str:
    return "```bash\n" + "\n".join(lines) + "\n```"
