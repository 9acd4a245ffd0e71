"""Print issue 19's fidelity figures: both development tables validated with shipped profiles (no
fit), per model x P2P group, and TokenWeave's vLLM prefill latencies (figure 11a/11b); and issue
29's: the 70B figure with the paired P2P on/off table (gpt-fast-flash), per model x P2P x framework
group, against its bars, with the decode time P2P off adds over P2P on.

    PYTHONPATH=$PWD python tools/dev/fidelity_figures.py [--shared ../shared] [--framework vllm] [--issue29]
    PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --issue37 [--as gpt-fast-graph=gpt-fast-flash]
    PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --issue39
    PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --groups [--as OLD=NEW]

``--issue37`` prints issue 37's acceptance figures: the 70B figure with both CUDA-graph tables (flash
and graph), the 405B 2-node table, and the 8B compiled table with the 70B figure (``--as OLD=NEW``
validates rows naming framework OLD as NEW, e.g. before a framework exists).

``--groups`` validates every development table and writes each table x model x P2P x framework
group's errors to laddersim/data/validation/development_groups.csv and into the README's table
(laddersim.validation.development_groups), which the report quotes: one command regenerates both.

``--issue39`` prints issue 39's: the pipeline x tensor parallel table (``pp`` column) against its bars,
per model x P2P group, with the prefill error.

Needs ../shared (the measured tables are not shipped); writes nothing but ``--groups``'s two files.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

import pandas as pd

from laddersim.model.shape import ModelShape
from laddersim.simulation.simulate import make_scenario, simulate
from laddersim.validation.core import ValidationSetup, error_summary, read_measured, validate
from laddersim.validation.development_groups import GROUPS_FILE, group_errors, groups_csv, read_groups, with_readme_table
from laddersim.validation.labels import MODEL_P2P, with_model_p2p
from laddersim.validation.p2p_pairs import p2p_off_pairs, pair_summary

DEV_TABLES = ("validation/ladder_70b_tp_sweep.csv", "validation/ladder_8b_tp_sweep.csv")
ISSUE29_TABLES = ("validation/ladder_70b_tp_sweep.csv", "validation/ladder_flash_p2p_sweep.csv")
# Issue 29's acceptance bars: tokens/s median, every group's median (%), speedup median and worst
# (pp), and the P2P-off extra decode time's median error (%) over the pairs where it is >= 3%.
ISSUE29_BARS = {"tokens_per_s_median": 6.0, "group_median": 8.0, "speedup_median": 2.0, "speedup_worst": 8.0,
                "extra_decode_median": 15.0}
# TokenWeave's models (Hugging Face config.json of each): Llama-3.3-70B has Llama-3.1-70B's shape.
QWEN25_72B = ModelShape(name="qwen2.5-72b", n_layers=80, dim=8192, n_heads=64, n_kv_heads=8,
                        intermediate_size=29568, vocab_size=152064)
TOKENWEAVE_MODELS = {"Llama-3.3-70B-Instruct": "llama-3.1-70b", "Qwen2.5-72B-Instruct": QWEN25_72B}
TOKENWEAVE_FILES = {8: "reference_data/tokenweave/figure_11a.csv", 4: "reference_data/tokenweave/figure_11b.csv"}
TOKENWEAVE_MAX_PROMPT = 16384  # the issue's range, 1k-16k


def dev_tables(shared: Path, setup: ValidationSetup) -> pd.DataFrame:
    frames = [validate(read_measured(shared / name), setup) for name in DEV_TABLES]
    return pd.concat(frames, ignore_index=True)


def print_dev(frame: pd.DataFrame) -> None:
    err = frame["rel_error"].abs() * 100
    other = frame[frame["schedule"] != "standard"]["speedup_error_pp"].abs().dropna()
    print(f"both tables ({len(frame)} rows): tokens/s median {err.median():.2f}% worst {err.max():.2f}%; "
          f"speedup median {other.median():.2f} pp worst {other.max():.2f} pp")
    for (model, p2p), part in frame.groupby(["model", "p2p"]):
        e = part["rel_error"].abs() * 100
        s = part[part["schedule"] != "standard"]["speedup_error_pp"].abs().dropna()
        print(f"  {model} p2p={p2p} ({len(part)} rows): tokens/s median {e.median():.2f}% worst {e.max():.2f}%; "
              f"speedup median {s.median():.2f} pp worst {s.max():.2f} pp")
    for model, part in frame.groupby("model"):
        s = part[part["schedule"] != "standard"]["speedup_error_pp"].abs().dropna()
        e = part["rel_error"].abs() * 100
        print(f"  {model}: tokens/s median {e.median():.2f}%; speedup median {s.median():.2f} pp worst {s.max():.2f} pp")


def issue29(shared: Path) -> dict[str, float]:
    """Issue 29's figures on the 70B figure with the paired P2P on/off table, shipped profiles."""
    frame = pd.concat([validate(read_measured(shared / name)) for name in ISSUE29_TABLES], ignore_index=True)
    overall = error_summary(frame).iloc[0]
    groups = error_summary(with_model_p2p(frame), MODEL_P2P)
    print(groups.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    pairs = pair_summary(p2p_off_pairs(frame))
    figures = {"tokens_per_s_median": overall["tokens_per_s_median_abs_err_pct"],
               "group_median": groups["tokens_per_s_median_abs_err_pct"].max(),
               "speedup_median": overall["speedup_median_abs_err_pp"], "speedup_worst": overall["speedup_worst_abs_err_pp"],
               "extra_decode_median": pairs["extra_decode_median_abs_err_pct"]}
    for key, value in figures.items():
        print(f"  {key}: {value:.2f} (bar {ISSUE29_BARS[key]:g}) {'PASS' if value <= ISSUE29_BARS[key] else 'MISS'}")
    print(f"  ({pairs['scored_pairs']} of {pairs['pairs']} on/off pairs scored; extra decode worst "
          f"{pairs['extra_decode_worst_abs_err_pct']:.1f}%)")
    return figures


ISSUE37_PAIRED = ("validation/ladder_70b_tp_sweep.csv", "validation/ladder_flash_p2p_sweep.csv",
                  "validation/ladder_graph_p2p_sweep.csv")
ISSUE37_BARS = {"tokens_per_s_median": 5.0, "group_median": 8.0, "speedup_median": 2.0, "speedup_worst": 8.0,
                "extra_decode_median": 15.0}
ISSUE37_405B = "validation/ladder_405b_2node.csv"
ISSUE37_405B_BARS = {"tokens_per_s_median": 5.0, "speedup_median": 2.0, "speedup_worst": 5.0, "prefill_median": 10.0}
ISSUE37_COMPILED_BARS = {"tokens_per_s_median": 2.3, "speedup_median": 1.3}  # "no worse than today"


def _bars(figures: dict[str, float], bars: dict[str, float]) -> None:
    for key, value in figures.items():
        print(f"  {key}: {value:.2f} (bar {bars[key]:g}) {'PASS' if value <= bars[key] else 'MISS'}")


def _read(shared: Path, name: str, rename: dict[str, str]) -> pd.DataFrame:
    path = shared / name
    raw = pd.read_csv(path)
    if not rename or "framework" not in raw.columns or not raw["framework"].isin(list(rename)).any():
        return read_measured(path)
    raw["framework"] = raw["framework"].replace(rename)
    with tempfile.TemporaryDirectory() as folder:
        renamed = Path(folder) / path.name
        raw.to_csv(renamed, index=False)
        return read_measured(renamed, models_dir=path.parent / "models")


def phase_errors(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model x P2P x framework group, the median signed error (%) of the prefill and of the
    decode time, over the rows that measured them (the standard and desync_half rows, which overlap
    nothing, apart)."""
    out = frame.assign(prefill_err=(frame["predicted_prefill_s"] / frame["prefill_s"] - 1) * 100,
                       decode_err=(frame["predicted_decode_s"] / frame["decode_s"] - 1) * 100)
    plain = out[out["schedule"].isin(["standard", "desync_half"])]
    return pd.DataFrame({"prefill_median_err_pct": out.groupby(MODEL_P2P)["prefill_err"].median(),
                         "decode_median_err_pct": out.groupby(MODEL_P2P)["decode_err"].median(),
                         "prefill_median_err_pct_standard": plain.groupby(MODEL_P2P)["prefill_err"].median()})


def issue37(shared: Path, rename: dict[str, str]) -> dict[str, float]:
    """Issue 37's acceptance figures, shipped profiles, no fit."""
    tables = [validate(_read(shared, name, rename)) for name in ISSUE37_PAIRED]
    frame = pd.concat(tables, ignore_index=True)
    overall = error_summary(frame).iloc[0]
    groups = error_summary(with_model_p2p(frame), MODEL_P2P)
    print("70B figure + flash + graph tables:")
    print(groups.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(phase_errors(with_model_p2p(frame)).to_string(float_format=lambda v: f"{v:+.2f}"))
    pairs = pair_summary(pd.concat([p2p_off_pairs(table) for table in tables], ignore_index=True))  # each table's own
    figures = {"tokens_per_s_median": overall["tokens_per_s_median_abs_err_pct"],
               "group_median": groups["tokens_per_s_median_abs_err_pct"].max(),
               "speedup_median": overall["speedup_median_abs_err_pp"], "speedup_worst": overall["speedup_worst_abs_err_pp"],
               "extra_decode_median": pairs["extra_decode_median_abs_err_pct"]}
    _bars(figures, ISSUE37_BARS)
    print(f"  ({pairs['scored_pairs']} of {pairs['pairs']} on/off pairs scored; extra decode worst "
          f"{pairs['extra_decode_worst_abs_err_pct']:.1f}%)")
    big = validate(_read(shared, ISSUE37_405B, rename))
    summary = error_summary(big).iloc[0]
    prefill = (big["predicted_prefill_s"] / big["prefill_s"] - 1).abs() * 100
    print("405B TP 16 over 2 nodes:")
    cols = ["batch", "schedule", "tokens_per_s", "predicted_tokens_per_s", "rel_error", "speedup_error_pp",
            "prefill_s", "predicted_prefill_s", "decode_s", "predicted_decode_s"]
    print(big[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    big_figures = {"tokens_per_s_median": summary["tokens_per_s_median_abs_err_pct"],
                   "speedup_median": summary["speedup_median_abs_err_pp"],
                   "speedup_worst": summary["speedup_worst_abs_err_pp"], "prefill_median": float(prefill.median())}
    _bars(big_figures, ISSUE37_405B_BARS)
    compiled = dev_tables(shared, ValidationSetup())
    both = error_summary(compiled).iloc[0]
    print("8B compiled table + 70B figure:")
    _bars({"tokens_per_s_median": both["tokens_per_s_median_abs_err_pct"],
           "speedup_median": both["speedup_median_abs_err_pp"]}, ISSUE37_COMPILED_BARS)
    return {**figures, **{f"405b_{k}": v for k, v in big_figures.items()}}


# Every measured table the simulator is developed against (ladder_pp_sweep.csv is left out: pipeline
# parallelism is not modelled).
DEVELOPMENT_TABLES = ("validation/ladder_70b_tp_sweep.csv", "validation/ladder_8b_tp_sweep.csv",
                      "validation/ladder_flash_p2p_sweep.csv", "validation/ladder_graph_p2p_sweep.csv",
                      "validation/ladder_405b_2node.csv", "validation/ladder_pp_sweep.csv")
README = Path(__file__).resolve().parents[2] / "README.md"


def development_groups(shared: Path, rename: dict[str, str]) -> pd.DataFrame:
    """Every development table validated (shipped profiles, no fit), one row per table x model x
    P2P x framework group; a framework validated as another (``--as``) is named ``OLD as NEW``."""
    setup = ValidationSetup()
    frames = []
    for name in DEVELOPMENT_TABLES:
        raw = pd.read_csv(shared / name)
        groups = group_errors(validate(_read(shared, name, rename), setup), Path(name).name, setup.framework)
        named = set(raw["framework"]) if "framework" in raw.columns else set()
        for old, new in rename.items():
            if old in named and new not in named:
                groups["framework"] = groups["framework"].replace(new, f"{old} as {new}")
        frames.append(groups)
    return pd.concat(frames, ignore_index=True)


def write_groups(shared: Path, rename: dict[str, str]) -> None:
    groups = development_groups(shared, rename)
    command = "PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --groups" + "".join(
        f" --as {shlex.quote(f'{old}={new}')}" for old, new in rename.items())
    GROUPS_FILE.write_text(groups_csv(groups, command, [Path(n).name for n in DEVELOPMENT_TABLES]))
    README.write_text(with_readme_table(README.read_text(), read_groups()[0]))  # as the report reads it
    print(groups.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(f"wrote {GROUPS_FILE} and the table of {README}")


ISSUE39_TABLE = "validation/ladder_pp_sweep.csv"
ISSUE39_BARS = {"tokens_per_s_median": 5.0, "group_median": 8.0, "speedup_median": 2.0, "speedup_worst": 8.0,
                "prefill_median": 10.0}


def issue39(shared: Path) -> dict[str, float]:
    """Issue 39's acceptance figures on the pipeline table, shipped profiles, no fit."""
    frame = validate(read_measured(shared / ISSUE39_TABLE))
    overall = error_summary(frame).iloc[0]
    groups = error_summary(with_model_p2p(frame), MODEL_P2P)
    print(groups.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(phase_errors(with_model_p2p(frame)).to_string(float_format=lambda v: f"{v:+.2f}"))
    prefill = (frame["predicted_prefill_s"] / frame["prefill_s"] - 1).abs() * 100
    figures = {"tokens_per_s_median": overall["tokens_per_s_median_abs_err_pct"],
               "group_median": groups["tokens_per_s_median_abs_err_pct"].max(),
               "speedup_median": overall["speedup_median_abs_err_pp"], "speedup_worst": overall["speedup_worst_abs_err_pp"],
               "prefill_median": float(prefill.median())}
    _bars(figures, ISSUE39_BARS)
    return figures


def tokenweave(shared: Path, hardware: str, framework: str | None) -> pd.DataFrame:
    rows = []
    for tp, name in TOKENWEAVE_FILES.items():
        table = pd.read_csv(shared / name)
        table = table[table["model"].isin(TOKENWEAVE_MODELS) & (table["prompt_len"] <= TOKENWEAVE_MAX_PROMPT)]
        for row in table.itertuples(index=False):
            times = {}
            for schedule in ("standard", "upper_bound"):
                kw = {"framework": framework} if framework else {}
                scenario = make_scenario(TOKENWEAVE_MODELS[row.model], hardware, tp, 1, int(row.prompt_len), 1,
                                         schedule, "bfloat16", **kw)
                times[schedule] = simulate(scenario).summary()["prefill_s"] * 1e3
            rows.append({"tp": tp, "model": row.model, "prompt_len": row.prompt_len,
                         "measured_ms": row.baseline_multimem, "predicted_ms": times["standard"],
                         "measured_no_ar_ms": row.no_ar, "predicted_no_ar_ms": times["upper_bound"]})
    out = pd.DataFrame(rows)
    out["err_pct"] = (out["predicted_ms"] / out["measured_ms"] - 1) * 100
    out["no_ar_err_pct"] = (out["predicted_no_ar_ms"] / out["measured_no_ar_ms"] - 1) * 100
    out["measured_ar_share_pct"] = (1 - out["measured_no_ar_ms"] / out["measured_ms"]) * 100
    out["predicted_ar_share_pct"] = (1 - out["predicted_no_ar_ms"] / out["predicted_ms"]) * 100
    out["share_err_pp"] = out["predicted_ar_share_pct"] - out["measured_ar_share_pct"]
    return out


def print_tokenweave(out: pd.DataFrame) -> None:
    latency = pd.concat([out["err_pct"], out["no_ar_err_pct"]]).abs()
    print(f"TokenWeave prefill ({len(out)} settings x baseline/no-AllReduce): latency median {latency.median():.2f}% "
          f"worst {latency.max():.2f}%; AllReduce share error median {out['share_err_pp'].abs().median():.2f} pp "
          f"worst {out['share_err_pp'].abs().max():.2f} pp (predicted {out['predicted_ar_share_pct'].min():.0f}-"
          f"{out['predicted_ar_share_pct'].max():.0f}%, measured {out['measured_ar_share_pct'].min():.0f}-"
          f"{out['measured_ar_share_pct'].max():.0f}%)")
    print(out.to_string(index=False, float_format=lambda v: f"{v:.1f}"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default="../shared")
    parser.add_argument("--framework", default=None, help="framework for the TokenWeave rows (default: none given)")
    parser.add_argument("--rows", action="store_true", help="print every development row")
    parser.add_argument("--issue29", action="store_true", help="only issue 29's figures (70B + paired P2P table)")
    parser.add_argument("--issue37", action="store_true", help="only issue 37's figures (CUDA-graph tables, 405B)")
    parser.add_argument("--groups", action="store_true",
                        help="write every development group's errors (laddersim/data/validation/development_groups.csv, README)")
    parser.add_argument("--issue39", action="store_true", help="only issue 39's figures (the pipeline table)")
    parser.add_argument("--as", dest="rename", action="append", default=[], metavar="OLD=NEW",
                        help="validate rows naming framework OLD as framework NEW (--issue37, --groups)")
    args = parser.parse_args()
    shared = Path(args.shared)
    if not (shared / DEV_TABLES[0]).exists():
        print(f"no {shared / DEV_TABLES[0]}: pass --shared", file=sys.stderr)
        return 2
    rename = dict(item.split("=", 1) for item in args.rename)
    only = {"issue29": lambda: issue29(shared), "issue37": lambda: issue37(shared, rename),
            "issue39": lambda: issue39(shared), "groups": lambda: write_groups(shared, rename)}
    for flag, run in only.items():
        if getattr(args, flag):
            run()
            return 0
    frame = dev_tables(shared, ValidationSetup())
    print_dev(frame)
    if args.rows:
        cols = ["model", "p2p", "tp", "batch", "schedule", "tokens_per_s", "predicted_tokens_per_s", "rel_error",
                "speedup_error_pp"]
        print(frame[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print_tokenweave(tokenweave(shared, "h100-sxm-nvswitch", args.framework))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
