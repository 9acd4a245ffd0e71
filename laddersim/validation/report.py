"""Write the validation report: per-row table, speedups, error tables, figure, trend checks."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from laddersim.hardware.provenance_line import provenance_line
from laddersim.validation.core import error_summary
from laddersim.validation.figure import paper_figure
from laddersim.validation.labels import MODEL_P2P, model_label, setting_columns, setting_label, with_model_p2p
from laddersim.validation.p2p_pairs import SCORED_EXTRA_SHARE, p2p_off_pairs, pair_summary


def markdown_table(frame: pd.DataFrame, floatfmt: str = ".2f") -> str:
    """A GitHub table of ``frame``; floats as ``floatfmt``, NaN as -."""
    cols = list(frame.columns)
    def fmt(v):
        if isinstance(v, float):
            return "-" if pd.isna(v) else format(v, floatfmt)
        return str(v)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def trend_checks(frame: pd.DataFrame) -> list[tuple[str, bool, str]]:
    """The paper's qualitative findings, checked on the predicted (and measured) speedups, within
    each hardware, model, prompt and generation length the rows differ in (named in the check)."""
    lad = frame[(frame["schedule"] == "ladder") & frame["predicted_speedup"].notna()]  # with a standard row
    others = setting_columns(frame)
    checks = []
    groups = lad.groupby(others) if others else [((), lad)]
    for key, rows in groups:
        where = _where(dict(zip(others, key if isinstance(key, tuple) else (key,))))
        for batch, part in rows[rows["p2p"] == "on"].groupby("batch"):
            s = part.sort_values("tp")["predicted_speedup"].to_numpy()
            if len(s) < 2:
                continue
            checks.append((f"ladder speedup grows with TP (batch {batch}, P2P on{where})",
                           bool((s[1:] >= s[:-1]).all()), " -> ".join(f"{v:.3f}" for v in s)))
        for (tp, batch), part in rows.groupby(["tp", "batch"]):
            if set(part["p2p"]) == {"on", "off"}:
                on = float(part[part["p2p"] == "on"]["predicted_speedup"].iloc[0])
                off = float(part[part["p2p"] == "off"]["predicted_speedup"].iloc[0])
                checks.append((f"speedup larger with P2P off (TP {tp}, batch {batch}{where})", off > on,
                               f"{on:.3f} -> {off:.3f}"))
        for (tp, p2p), part in rows.groupby(["tp", "p2p"]):
            s = part.sort_values("batch")["predicted_speedup"].to_numpy()
            if len(s) > 1:
                checks.append((f"speedup shrinks with batch (TP {tp}, P2P {p2p}{where})", bool(s[-1] < s[0]),
                               " -> ".join(f"{v:.3f}" for v in s)))
    return checks


def _where(key: dict) -> str:
    return "".join(f", {setting_label(c, v)}" for c, v in key.items())


def _pairs_section(frame: pd.DataFrame) -> list[str]:
    """The decode time P2P off adds over P2P on, for every setting measured both ways."""
    pairs = p2p_off_pairs(frame)
    if not len(pairs):
        return []
    figures = pair_summary(pairs)
    table = pairs.assign(measured_extra_ms=pairs["measured_extra_s"] * 1e3, predicted_extra_ms=pairs["predicted_extra_s"] * 1e3,
                         measured_extra_pct=pairs["measured_extra_share"] * 100, error_pct=pairs["extra_error"] * 100)
    cols = [c for c in ["model", "framework", "tp", "batch", "gen_len", "schedule", "measured_extra_ms",
                        "predicted_extra_ms", "measured_extra_pct", "error_pct"] if c in table.columns]
    return ["## P2P off minus P2P on: extra decode time", "",
            f"{figures['pairs']} settings measured with P2P on and off; over the {figures['scored_pairs']} where P2P off "
            f"adds at least {SCORED_EXTRA_SHARE:.0%} of the P2P-on decode time, the predicted extra is off by "
            f"{figures['extra_decode_median_abs_err_pct']:.1f}% (median), {figures['extra_decode_worst_abs_err_pct']:.1f}% "
            "(worst).", "", markdown_table(table[cols], ".2f"), ""]


MEASURED_FILE = "measured.csv"  # the measured rows as read, beside the report (its Reproduce line names it)


def write_measured(measured: pd.DataFrame, out_dir: str | Path) -> Path:
    """The measured rows as read, as ``OUT_DIR/measured.csv``, so that the report's Reproduce line
    names a file its reader has. A model given by its config.json is named by its label and the
    config copied to ``OUT_DIR/models/<label>.json``, where ``read_measured`` looks for it."""
    import shutil

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for model in measured["model"].unique():
        source, copy = Path(str(model)), out_dir / "models" / f"{model_label(model)}.json"
        if source.suffix == ".json" and source.is_file() and not (copy.exists() and copy.samefile(source)):
            copy.parent.mkdir(exist_ok=True)
            shutil.copyfile(source, copy)
    path = out_dir / MEASURED_FILE
    measured.assign(model=measured["model"].map(model_label)).to_csv(path, index=False, lineterminator="\n")
    return path


def write_report(frame: pd.DataFrame, out_dir: str | Path, command: str, tp1: pd.DataFrame | None = None,
                 fit: tuple[tuple[str, ...], dict[str, float]] | None = None) -> Path:
    """The validation report; ``fit`` = (schedules fitted on, fitted parameters) for `laddersim fit`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if "model" in frame:  # a model read from a config file is named as the table names it, not by its path
        frame = frame.assign(model=frame["model"].map(model_label))
    if tp1 is not None and "model" in tp1:
        tp1 = tp1.assign(model=tp1["model"].map(model_label))
    frame.to_csv(out_dir / "validation.csv", index=False, float_format="%.6g")
    figures = paper_figure(frame, out_dir / "tokens_per_s_vs_tp")
    overall = error_summary(frame)
    lines = [
        "# Validation against measured tokens/s",
        "",
        f"Reproduce: `{command}`",
        "",
        provenance_line(frame["hardware"].dropna().unique()) if "hardware" in frame else "",
        "",
        "Bars: measured; black markers: laddersim's prediction.",
        "",
        f"![tokens/s vs TP]({figures[0].name})",
        "",
    ]
    if fit is not None:
        schedules, parameters = fit
        held_out = sorted(set(frame["schedule"]) - set(schedules))
        lines += [
            "## Fit",
            "",
            f"Fitted on the {', '.join(f'`{s}`' for s in schedules)} rows; "
            + (f"{', '.join(f'`{s}`' for s in held_out)} rows are predictions (held out)." if held_out
               else "no row is held out."),
            "",
            markdown_table(pd.DataFrame({"parameter": list(parameters), "value": list(parameters.values())}), ".4g"),
            "",
        ]
    lines += [
        "## Errors",
        "",
        "Tokens/s error = predicted / measured - 1; speedup error = predicted minus measured speedup over "
        "`standard` at the same setting, in percentage points (standard rows excluded).",
        "",
        markdown_table(pd.concat([overall, error_summary(with_model_p2p(frame), MODEL_P2P), error_summary(frame, "schedule"),
                             error_summary(frame, "p2p"), error_summary(frame, "batch")], ignore_index=True)),
        "",
    ]
    lines += _pairs_section(frame)
    lines += [
        "## Trends",
        "",
    ]
    checks = trend_checks(frame)
    for name, ok, detail in checks:
        lines.append(f"- {'PASS' if ok else 'MISS'}: {name}: {detail}")
    if not checks:
        lines.append("- none to check: no `ladder` row has a `standard` row at its setting and a second TP, "
                     "batch or P2P setting to compare with")
    if tp1 is not None:
        lines += ["", "At TP 1 there is nothing to hide:", "", markdown_table(tp1, ".4f")]
    cols = setting_columns(frame) + ["p2p", "tp", "batch", "schedule", "tokens_per_s", "predicted_tokens_per_s", "rel_error",
            "measured_speedup", "predicted_speedup", "speedup_error_pp"]
    table = frame[cols].copy()
    table["rel_error"] = table["rel_error"] * 100
    table = table.rename(columns={"rel_error": "error_pct", "tokens_per_s": "measured", "predicted_tokens_per_s": "predicted"})
    lines += ["", "## Every row", "", markdown_table(table, ".3f"), ""]
    path = out_dir / "index.md"
    path.write_text("\n".join(lines))
    return path
