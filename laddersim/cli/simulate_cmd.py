"""``laddersim simulate``: one scenario under one or more schedules; a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from laddersim.api import DEFAULT_SCHEDULES, simulate_schedules
from laddersim.cli.args import _number, add_scenario_args, positive_int
from laddersim.errors import UserInputError
from laddersim.io_write import check_output
from laddersim.tables import format_table

# Largest per-op noise sigma accepted: a lognormal multiplier of exp(2) at one sigma.
MAX_JITTER = 2.0


def register(sub) -> None:
    p = sub.add_parser("simulate", help="simulate one scenario under one or more schedules")
    add_scenario_args(p)
    p.add_argument("--schedule", action="append", default=None,
                   help="standard, parallel, ladder, upper_bound, desync_half, hybrid:N (repeatable; default standard and ladder)")
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per schedule")
    p.add_argument("--jitter", type=_number("jitter", float, f"a number from 0 to {MAX_JITTER:g}",
                                            lambda v: 0.0 <= v <= MAX_JITTER), default=0.0,
                   help="sigma of per-rank lognormal op-time noise (simulates every rank and step); "
                        f"at most {MAX_JITTER:g}, where one op in six already runs 7x its time")
    p.add_argument("--exact-steps", action="store_true",
                   help="with --jitter: simulate every decode step instead of a random sample of them")
    p.add_argument("--sample-steps", type=positive_int("sample-steps"), default=None,
                   help="with --jitter: decode steps to simulate (default: about 120,000 op-rank runs, "
                        "4 to 64 steps); the output carries the 95%% interval of the estimate")
    p.add_argument("--seed", type=_number("seed", int, "an integer from 0 to 2**63-1", lambda v: 0 <= v < 2**63),
                   default=0)
    p.add_argument("--out", metavar="FILE", help="also write the rows to FILE.csv, FILE.parquet or FILE.json")
    p.add_argument("--trace", metavar="OUT.json",
                   help="write a Chrome/Perfetto trace: every schedule, each its own process")
    p.add_argument("--trace-steps", default="3", type=_trace_steps,
                   help="decode steps in the trace after the prefill: a count or 'all' (default 3)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Every output path checked before the first simulation (the inputs are checked by the API).
    if args.out:
        out_format(args.out)
        check_output(args.out, "out")
    if args.trace:
        check_output(args.trace, "trace")
    rows, results = simulate_schedules(args.model, args.hardware, args.tp, args.batch, args.prompt_len,
                                       args.gen_len, args.schedule or DEFAULT_SCHEDULES, dtype=args.dtype,
                                       kv_cache=args.kv_cache, kv_reads=args.kv_reads, framework=args.framework,
                                       jitter=args.jitter, seed=args.seed,
                                       exact_steps=args.exact_steps, sample_steps=args.sample_steps,
                                       progress=ProgressBar)
    if args.trace:
        _write_trace(results, args.trace, args.trace_steps)
    if args.out:
        write_rows(rows, args.out)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_time_sources(results[0]), file=sys.stderr)  # stdout stays the table
        print(format_table(rows, [
            ("schedule", "schedule", "{}"), ("tp", "tp", "{}"), ("nodes", "nodes", "{}"),
            ("batch", "batch", "{}"), ("prefill_s", "prefill s", "{:.3f}"), ("decode_s", "decode s", "{:.3f}"),
            ("tpot_s", "ms/token", "{:.3f}", 1e3), ("tokens_per_s", "tokens/s", "{:.1f}"),
            ("speedup_vs_standard", "vs standard", "{:.3f}x"),
            ("exposed_comm_s", "exposed comm s", "{:.3f}"),
        ]))
        for row in rows:
            if "decode_s_ci95" in row:
                lo, hi = row["decode_s_ci95"]
                print(f"{row['schedule']}: decode from {row['sampled_steps']} sampled steps of "
                      f"{row['gen_len'] - 1}; 95% interval {lo:.4f}-{hi:.4f} s (--exact-steps: all)")
    return 0


def _time_sources(result) -> str:
    """Where each op's time came from (as AIConfigurator labels it): SILICON = a measured table,
    HYBRID = a measured table extended by the roofline, SOL = the roofline/bandwidth model."""
    from laddersim.costs.op_costs import Phase, op_time_sources

    s = result.scenario
    w = s.workload
    kinds = list(dict.fromkeys(result.program.kinds))
    lines = ["op time sources (SILICON: measured table; HYBRID: table extended by the roofline; SOL: roofline model):"]
    for phase in (Phase("prefill", w.batch, w.prompt_len), Phase("decode", w.batch, 1)):
        sources = op_time_sources(s.model, s.hardware, w, s.tp, phase)
        lines.append(f"  {phase.name}: " + ", ".join(f"{k} {sources[k]}" for k in kinds if k in sources))
    return "\n".join(lines)


class ProgressBar:
    """A stderr bar for a simulation expected to take more than a couple of seconds (judged from
    its size: engine runs x ops x ranks); silent otherwise."""

    OP_RANKS = 60_000  # about two seconds of engine time

    def __init__(self, label: str):
        self.label = label
        self.bar = None

    def update(self, done: int, total: int, op_ranks: int) -> None:
        if self.bar is None and total * op_ranks > self.OP_RANKS:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.label, unit="pass", file=sys.stderr, leave=False,
                            dynamic_ncols=True)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


OUT_FORMATS = (".csv", ".parquet", ".json")


def out_format(path: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in OUT_FORMATS:
        raise UserInputError(f"out: '{path}' has no known format; allowed: a file ending in {', '.join(OUT_FORMATS)}")
    return suffix


def write_rows(rows: list[dict], path: str) -> None:
    """The rows --json prints, as CSV, Parquet or the same JSON array."""
    suffix = out_format(path)
    import pandas as pd

    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".json":
            Path(path).write_text(json.dumps(rows, indent=2) + "\n")
        elif suffix == ".csv":
            pd.DataFrame(rows).to_csv(path, index=False)
        else:
            pd.DataFrame(rows).to_parquet(path, index=False)
    except OSError as exc:
        raise UserInputError(f"out: cannot write {path}: {exc.strerror}") from None
    print(f"out: {Path(path)} ({len(rows)} rows)", file=sys.stderr)


def _trace_steps(text: str) -> str | int:
    """``--trace-steps``: 'all' or a count of ASCII digits (str.isdigit() alone takes '\u00b3')."""
    if text == "all":
        return text
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"trace-steps must be a count (0, 1, 2, ...) or 'all', got {text[:40]!r}")
    return int(text) if len(text.lstrip("0")) <= 12 else 10**12  # beyond any run's decode steps


def _write_trace(results, path: str, steps: str | int) -> None:
    import pandas as pd

    from laddersim.costs.collective_labels import collective_args
    from laddersim.trace import write_chrome_trace

    frames = []
    for result in results:
        n = len(result.decode_metrics)
        if steps == "all":
            wanted = list(range(n))
        else:
            wanted = list(range(min(steps, n)))
        frames.append(result.timeline("prefill").assign(schedule=result.scenario.schedule))
        if wanted:
            frames.append(result.timeline(wanted).assign(schedule=result.scenario.schedule))
    spans = pd.concat(frames, ignore_index=True)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        sc = results[0].scenario  # every schedule runs the same collectives (model, hardware, TP)
        write_chrome_trace(spans, path, title=f"{sc.model.name} on {sc.hardware.name}",
                           collectives=collective_args(sc.model, sc.hardware, sc.workload, sc.tp))
    except OSError as exc:
        raise UserInputError(f"trace: cannot write {path}: {exc.strerror}") from None
    print(f"trace: {Path(path)} ({len(spans)} spans, {len(results)} schedules)", file=sys.stderr)
