"""Consecutive closed loops, and what they say together: the acceptance check as written.

One closed loop (``calibration/closed_loop.py``) is one sample of a noisy machine: on two shared
CPU cores a measured speedup moves by about as much as the 5 pp bar from one run to the next. The
check "in three consecutive runs" is a statement about a series, and so is the question behind it:
which rows does the calibration miss *systematically* (a mean error over the runs well outside
their spread) and which only by noise. This runs ``--runs`` closed loops back to back (each in
``RUN_DIR/run_i``, report in ``OUT/run_i``; a finished run is kept and an interrupted one resumes,
as closed_loop itself does), or summarises finished ones (``--summarize OUT_DIR ...``), and writes

- ``OUT/series.csv``: every run's validated rows, with a ``run`` column;
- ``OUT/index.md``: per run its figures and whether it met the bars, then per row (batch x
  schedule) the mean and spread of the speedup error over the runs;

and prints as its last line
``closed loop series: N runs, P met both bars (longest streak S); largest row bias: batch B SCHEDULE +X pp (sd Y pp)``.

    python calibration/closed_loop_series.py --runs 3 [--run-dir runs/closed_loop_series] [--out reports/closed_loop/series]
    python calibration/closed_loop_series.py --summarize /tmp/a_out /tmp/b_out --out /tmp/series
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from calibration.closed_loop import run_figures  # noqa: E402  (the closed loop's own summary figures)
from laddersim.validation.report import markdown_table  # noqa: E402

TOKENS_BAR_PCT = 20.0  # the accuracy bars, per run: tokens/s median |error| and speedup median |error|
SPEEDUP_BAR_PP = 5.0
VALIDATION = Path("calibrated") / "validation.csv"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        self.exit(2, f"closed_loop_series: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="closed loops to run back to back (default 3)")
    parser.add_argument("--run-dir", default="runs/closed_loop_series")
    parser.add_argument("--out", default="reports/closed_loop/series")
    parser.add_argument("--summarize", nargs="+", metavar="OUT_DIR",
                        help="summarise finished closed loops (their --out folders) instead of running any")
    parser.add_argument("--tokens-bar", type=float, default=TOKENS_BAR_PCT, help="per-run tokens/s median bar, %%")
    parser.add_argument("--speedup-bar", type=float, default=SPEEDUP_BAR_PP, help="per-run speedup median bar, pp")
    return parser


def longest_streak(flags: list[bool]) -> int:
    """The longest run of consecutive True."""
    best = current = 0
    for flag in flags:
        current = current + 1 if flag else 0
        best = max(best, current)
    return best


def per_run(frames: dict[str, pd.DataFrame], tokens_bar: float, speedup_bar: float) -> pd.DataFrame:
    rows = []
    for name, frame in frames.items():
        figures = run_figures(frame)
        met = figures["tokens_median_pct"] <= tokens_bar and figures["speedup_median_pp"] <= speedup_bar
        rows.append({"run": name, **figures, "met": met})
    return pd.DataFrame(rows)


def row_bias(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per batch x schedule (standard left out: its speedup is 1 by definition), the speedup error
    over the runs: mean (the bias a mechanism would remove), standard deviation (the noise), and
    the mean measured and predicted speedups."""
    both = pd.concat([frame.assign(run=name) for name, frame in frames.items()], ignore_index=True)
    other = both[both["schedule"] != "standard"]
    grouped = other.groupby(["batch", "schedule"])
    table = pd.DataFrame({
        "runs": grouped["speedup_error_pp"].count(),
        "mean_error_pp": grouped["speedup_error_pp"].mean(),
        "sd_error_pp": grouped["speedup_error_pp"].std(ddof=1),
        "mean_measured_speedup": grouped["measured_speedup"].mean(),
        "mean_predicted_speedup": grouped["predicted_speedup"].mean(),
    }).reset_index()
    # beyond two standard errors of the mean: a bias, not the runs' noise (one run: no spread, no call)
    table["bias"] = table["mean_error_pp"].abs() > 2 * table["sd_error_pp"] / table["runs"] ** 0.5
    return table


def series_line(runs: pd.DataFrame, bias: pd.DataFrame) -> str:
    n, met = len(runs), int(runs["met"].sum())
    line = f"closed loop series: {n} runs, {met} met both bars (longest streak {longest_streak(list(runs['met']))})"
    if not bias.empty:
        worst = bias.loc[bias["mean_error_pp"].abs().idxmax()]
        sd = "" if pd.isna(worst["sd_error_pp"]) else f" (sd {worst['sd_error_pp']:.1f} pp)"
        line += (f"; largest row bias: batch {int(worst['batch'])} {worst['schedule']} "
                 f"{worst['mean_error_pp']:+.1f} pp{sd}")
    return line


def write_report(out: Path, frames: dict[str, pd.DataFrame], sources: dict[str, Path], command: str,
                 tokens_bar: float, speedup_bar: float) -> str:
    out.mkdir(parents=True, exist_ok=True)
    pd.concat([frame.assign(run=name) for name, frame in frames.items()], ignore_index=True).to_csv(
        out / "series.csv", index=False)
    runs, bias = per_run(frames, tokens_bar, speedup_bar), row_bias(frames)
    line = series_line(runs, bias)
    text = [
        "# Closed loops in a row",
        "",
        f"Reproduce: `{command}`. Bars per run: tokens/s median |error| <= {tokens_bar:g}%, "
        f"speedup median |error| <= {speedup_bar:g} pp. Rows: `series.csv`.",
        "",
        "    " + line,
        "",
        "## Each run",
        "",
        markdown_table(runs.assign(source=[str(sources[name]) for name in runs["run"]])),
        "",
        "## Each row over the runs",
        "",
        "`bias`: the mean error lies beyond two standard errors (|mean| > 2 sd / sqrt(runs)), a miss",
        "a mechanism or a calibration should remove; the spread (sd) is what the machine's noise",
        "leaves, in the measured speedup and in the calibration alike.",
        "",
        markdown_table(bias),
        "",
    ]
    (out / "index.md").write_text("\n".join(text))
    return line


def read_validation(out_dir: Path) -> pd.DataFrame:
    path = out_dir / VALIDATION
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no validated rows (a finished closed_loop.py --out folder holds them)")
    return pd.read_csv(path)


def run_series(args) -> dict[str, Path]:
    """Run the closed loops not yet finished; {run name: its --out folder}."""
    loop = Path(__file__).with_name("closed_loop.py")
    outs = {}
    for i in range(1, args.runs + 1):
        name = f"run_{i}"
        run_dir, out = Path(args.run_dir) / name, Path(args.out) / name
        if (out / VALIDATION).is_file():
            print(f"[closed_loop_series] {name}: finished before, kept ({out})", file=sys.stderr, flush=True)
        else:
            cmd = [sys.executable, str(loop), "--run-dir", str(run_dir), "--out", str(out)]
            print(f"[closed_loop_series] {name} of {args.runs}: $ " + " ".join(shlex.quote(c) for c in cmd),
                  file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True)
        outs[name] = out
    return outs


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if args.summarize:
        outs = {Path(d).name or str(d): Path(d) for d in args.summarize}
        if len(outs) != len(args.summarize):
            parser.error("--summarize: two folders share a name; give each run its own folder name")
    else:
        outs = run_series(args)
    try:
        frames = {name: read_validation(path) for name, path in outs.items()}
    except FileNotFoundError as err:
        parser.error(str(err))
    command = "python calibration/closed_loop_series.py " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    line = write_report(Path(args.out), frames, outs, command.strip(), args.tokens_bar, args.speedup_bar)
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
