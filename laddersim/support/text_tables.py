"""Plain-text tables for the terminal."""

from __future__ import annotations


def format_table(rows: list[dict], columns: list[tuple]) -> str:
    """``columns``: (key, header, format[, scale]); None values print as '-'."""
    header = [c[1] for c in columns]
    body = []
    for row in rows:
        cells = []
        for col in columns:
            key, fmt = col[0], col[2]
            scale = col[3] if len(col) > 3 else 1
            value = row.get(key)
            cells.append("-" if value is None else fmt.format(value * scale if scale != 1 else value))
        body.append(cells)
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(lines)
