"""Fidelity figures of the shipped profiles (no fit) against the development tables
(laddersim/data/validation, see its PROVENANCE.md), each set against the bars it is held to.

    PYTHONPATH=$PWD python tools/dev/fidelity_figures.py [--framework vllm] [--rows]
    PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --paired
    PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --graphs [--as gpt-fast-graph=gpt-fast-flash]
    PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --pipeline
    PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --groups [--as OLD=NEW]

Default: the 70B figure and the 8B compiled table per model x P2P group, and TokenWeave's vLLM
prefill latencies (figure 11a/11b; the original files, in the reference_data/ folder the
environment variable LADDERSIM_SHARED names: skipped without it).

``--paired``: the 70B figure with the paired P2P on/off table (gpt-fast-flash), per model x P2P x
framework group, with the decode time P2P off adds over P2P on. ``--graphs``: the 70B figure with
both CUDA-graph tables (flash and graph), the 405B two-node table, and the 8B compiled table with the
70B figure (``--as OLD=NEW`` validates rows naming framework OLD as NEW, e.g. before a framework
exists). ``--pipeline``: the pipeline x tensor parallel table (``pp`` column), with the prefill error.

``--groups`` validates every development table and writes each table x model x P2P x framework
group's errors to laddersim/data/validation/development_groups.csv and into the README's table
(laddersim.validation.development_groups), which the report quotes: one command regenerates both
(``laddersim validate`` with no table prints the same rows). Writes nothing else.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd

from laddersim.model.shape import ModelShape
from laddersim.profiles_check.sources import reference_data_root
from laddersim.simulation.simulate import make_scenario, simulate
from laddersim.support.resources import data_path
from laddersim.validation.core import ValidationSetup, error_summary, read_measured, validate
from laddersim.validation.development_groups import (
    DEVELOPMENT_TABLES, GROUPS_FILE, development_groups, groups_csv, read_development_tables, read_groups,
    with_readme_table,
)
from laddersim.validation.labels import MODEL_P2P, with_model_p2p
from laddersim.validation.p2p_pairs import p2p_off_pairs, pair_summary

COMPILED_TABLES = ("ladder_70b_tp_sweep.csv", "ladder_8b_tp_sweep.csv")
PAIRED_TABLES = ("ladder_70b_tp_sweep.csv", "ladder_flash_p2p_sweep.csv")
GRAPH_TABLES = ("ladder_70b_tp_sweep.csv", "ladder_flash_p2p_sweep.csv", "ladder_graph_p2p_sweep.csv")
MULTINODE_TABLE = "ladder_405b_2node.csv"
PIPELINE_TABLE = "ladder_pp_sweep.csv"
# The bars each set is held to: tokens/s median and every model x P2P group's median (%), speedup
# median and worst (pp), the P2P-off extra decode time's median error (%) over the pairs where it is
# >= 3% of the P2P-on decode, and the prefill median (%).
PAIRED_BARS = {"tokens_per_s_median": 6.0, "group_median": 8.0, "speedup_median": 2.0, "speedup_worst": 8.0,
               "extra_decode_median": 15.0}
GRAPH_BARS = {"tokens_per_s_median": 5.0, "group_median": 8.0, "speedup_median": 2.0, "speedup_worst": 8.0,
              "extra_decode_median": 15.0}
MULTINODE_BARS = {"tokens_per_s_median": 5.0, "speedup_median": 2.0, "speedup_worst": 5.0, "prefill_median": 10.0}
COMPILED_BARS = {"tokens_per_s_median": 2.3, "speedup_median": 1.3}
PIPELINE_BARS = {"tokens_per_s_median": 5.0, "group_median": 8.0, "speedup_median": 2.0, "speedup_worst": 8.0,
                 "prefill_median": 10.0}
# TokenWeave's models (Hugging Face config.json of each): Llama-3.3-70B has Llama-3.1-70B's shape.
QWEN25_72B = ModelShape(name="qwen2.5-72b", n_layers=80, dim=8192, n_heads=64, n_kv_heads=8,
                        intermediate_size=29568, vocab_size=152064)
TOKENWEAVE_MODELS = {"Llama-3.3-70B-Instruct": "llama-3.1-70b", "Qwen2.5-72B-Instruct": QWEN25_72B}
TOKENWEAVE_FILES = {8: "tokenweave/figure_11a.csv", 4: "tokenweave/figure_11b.csv"}  # under reference_data/
TOKENWEAVE_MAX_PROMPT = 16384  # the prompts of 1k-16k tokens
README = Path(__file__).resolve().parents[2] / "README.md"


def table_path(name: str) -> Path:
    return data_path("validation", name)


def read_renamed(name: str, rename: dict[str, str]) -> pd.DataFrame:
    """A development table as ``read_measured`` gives it, its framework column renamed OLD -> NEW."""
    frame = read_measured(table_path(name))
    if rename and "framework" in frame.columns:
        frame["framework"] = frame["framework"].replace(rename)
    return frame


def compiled_tables(setup: ValidationSetup) -> pd.DataFrame:
    return pd.concat([validate(read_measured(table_path(name)), setup) for name in COMPILED_TABLES], ignore_index=True)


def print_compiled(frame: pd.DataFrame) -> None:
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


def print_bars(figures: dict[str, float], bars: dict[str, float]) -> None:
    for key, value in figures.items():
        print(f"  {key}: {value:.2f} (bar {bars[key]:g}) {'PASS' if value <= bars[key] else 'MISS'}")


def paired_figures(tables: list[pd.DataFrame]) -> tuple[dict[str, float], dict]:
    """Tokens/s, group and speedup figures of validated tables together, and their P2P-off pairs
    (each table's own pairs); prints the groups."""
    frame = pd.concat(tables, ignore_index=True)
    overall = error_summary(frame).iloc[0]
    groups = error_summary(with_model_p2p(frame), MODEL_P2P)
    print(groups.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    pairs = pair_summary(pd.concat([p2p_off_pairs(table) for table in tables], ignore_index=True))
    figures = {"tokens_per_s_median": overall["tokens_per_s_median_abs_err_pct"],
               "group_median": groups["tokens_per_s_median_abs_err_pct"].max(),
               "speedup_median": overall["speedup_median_abs_err_pp"], "speedup_worst": overall["speedup_worst_abs_err_pp"],
               "extra_decode_median": pairs["extra_decode_median_abs_err_pct"]}
    return figures, pairs


def print_pairs(pairs: dict) -> None:
    print(f"  ({pairs['scored_pairs']} of {pairs['pairs']} on/off pairs scored; extra decode worst "
          f"{pairs['extra_decode_worst_abs_err_pct']:.1f}%)")


def paired() -> dict[str, float]:
    """The 70B figure with the paired P2P on/off table, shipped profiles."""
    figures, pairs = paired_figures([pd.concat([validate(read_measured(table_path(name))) for name in PAIRED_TABLES],
                                               ignore_index=True)])
    print_bars(figures, PAIRED_BARS)
    print_pairs(pairs)
    return figures


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


def graphs(rename: dict[str, str]) -> dict[str, float]:
    """The CUDA-graph tables with the 70B figure, the 405B two-node table and the compiled tables,
    shipped profiles, no fit."""
    tables = [validate(read_renamed(name, rename)) for name in GRAPH_TABLES]
    print("70B figure + flash + graph tables:")
    figures, pairs = paired_figures(tables)
    frame = with_model_p2p(pd.concat(tables, ignore_index=True))
    print(phase_errors(frame).to_string(float_format=lambda v: f"{v:+.2f}"))
    print_bars(figures, GRAPH_BARS)
    print_pairs(pairs)
    big = validate(read_renamed(MULTINODE_TABLE, rename))
    summary = error_summary(big).iloc[0]
    prefill = (big["predicted_prefill_s"] / big["prefill_s"] - 1).abs() * 100
    print("405B TP 16 over 2 nodes:")
    cols = ["batch", "schedule", "tokens_per_s", "predicted_tokens_per_s", "rel_error", "speedup_error_pp",
            "prefill_s", "predicted_prefill_s", "decode_s", "predicted_decode_s"]
    print(big[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    big_figures = {"tokens_per_s_median": summary["tokens_per_s_median_abs_err_pct"],
                   "speedup_median": summary["speedup_median_abs_err_pp"],
                   "speedup_worst": summary["speedup_worst_abs_err_pp"], "prefill_median": float(prefill.median())}
    print_bars(big_figures, MULTINODE_BARS)
    both = error_summary(compiled_tables(ValidationSetup())).iloc[0]
    print("8B compiled table + 70B figure:")
    print_bars({"tokens_per_s_median": both["tokens_per_s_median_abs_err_pct"],
                "speedup_median": both["speedup_median_abs_err_pp"]}, COMPILED_BARS)
    return {**figures, **{f"405b_{k}": v for k, v in big_figures.items()}}


def pipeline() -> dict[str, float]:
    """The pipeline table's figures, shipped profiles, no fit."""
    frame = validate(read_measured(table_path(PIPELINE_TABLE)))
    overall = error_summary(frame).iloc[0]
    groups = error_summary(with_model_p2p(frame), MODEL_P2P)
    print(groups.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(phase_errors(with_model_p2p(frame)).to_string(float_format=lambda v: f"{v:+.2f}"))
    prefill = (frame["predicted_prefill_s"] / frame["prefill_s"] - 1).abs() * 100
    figures = {"tokens_per_s_median": overall["tokens_per_s_median_abs_err_pct"],
               "group_median": groups["tokens_per_s_median_abs_err_pct"].max(),
               "speedup_median": overall["speedup_median_abs_err_pp"], "speedup_worst": overall["speedup_worst_abs_err_pp"],
               "prefill_median": float(prefill.median())}
    print_bars(figures, PIPELINE_BARS)
    return figures


def groups_of_every_table(rename: dict[str, str]) -> pd.DataFrame:
    """Every development table validated together (shipped profiles, no fit), one row per table x
    model x P2P x framework group; a framework validated as another (``--as``) is named ``OLD as NEW``
    in the tables that name OLD and not NEW."""
    setup = ValidationSetup()
    frame, tables = read_development_tables()
    named = {name: set(frame.loc[[t == name for t in tables], "framework"].dropna()) if "framework" in frame else set()
             for name in DEVELOPMENT_TABLES}
    if rename and "framework" in frame.columns:
        frame["framework"] = frame["framework"].replace(rename)
    groups = development_groups(validate(frame, setup), tables, setup.framework)
    for old, new in rename.items():
        renamed = groups["table"].map(lambda t: old in named[t] and new not in named[t]) & (groups["framework"] == new)
        groups.loc[renamed, "framework"] = f"{old} as {new}"
    return groups


def write_groups(rename: dict[str, str]) -> None:
    groups = groups_of_every_table(rename)
    command = "PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --groups" + "".join(
        f" --as {shlex.quote(f'{old}={new}')}" for old, new in rename.items())
    GROUPS_FILE.write_text(groups_csv(groups, command, list(DEVELOPMENT_TABLES)))
    README.write_text(with_readme_table(README.read_text(), read_groups()[0]))  # as the report reads it
    print(groups.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(f"wrote {GROUPS_FILE} and the table of {README}")


def tokenweave(reference_data: Path, hardware: str, framework: str | None) -> pd.DataFrame:
    rows = []
    for tp, name in TOKENWEAVE_FILES.items():
        table = pd.read_csv(reference_data / name)
        table = table[table["model"].isin(TOKENWEAVE_MODELS) & (table["prompt_len"] <= TOKENWEAVE_MAX_PROMPT)]
        for row in table.itertuples(index=False):
            times = {}
            for schedule in ("standard", "upper_bound"):
                kw = {"framework": framework} if framework else {}
                scenario = make_scenario(model=TOKENWEAVE_MODELS[row.model], hardware=hardware, tp=tp, batch=1,
                                         prompt_len=int(row.prompt_len), gen_len=1, schedule=schedule, dtype="bfloat16",
                                         **kw)
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
    parser.add_argument("--framework", default=None, help="framework for the TokenWeave rows (default: none given)")
    parser.add_argument("--rows", action="store_true", help="print every row of the compiled tables")
    parser.add_argument("--paired", action="store_true", help="only the 70B figure with the paired P2P table")
    # --issue37: the name h100-sxm-p2p-off.yaml's sources run this with (a profile's text is hashed
    # into every report that used it, so it stays as written).
    parser.add_argument("--graphs", "--issue37", dest="graphs", action="store_true",
                        help="only the CUDA-graph tables and the 405B table")
    parser.add_argument("--groups", action="store_true",
                        help="write every development group's errors (laddersim/data/validation/development_groups.csv, README)")
    parser.add_argument("--pipeline", action="store_true", help="only the pipeline table")
    parser.add_argument("--as", dest="rename", action="append", default=[], metavar="OLD=NEW",
                        help="validate rows naming framework OLD as framework NEW (--graphs, --groups)")
    args = parser.parse_args()
    rename = dict(item.split("=", 1) for item in args.rename)
    only = {"paired": paired, "graphs": lambda: graphs(rename), "pipeline": pipeline,
            "groups": lambda: write_groups(rename)}
    for flag, run in only.items():
        if getattr(args, flag):
            run()
            return 0
    frame = compiled_tables(ValidationSetup())
    print_compiled(frame)
    if args.rows:
        cols = ["model", "p2p", "tp", "batch", "schedule", "tokens_per_s", "predicted_tokens_per_s", "rel_error",
                "speedup_error_pp"]
        print(frame[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    reference_data = reference_data_root()
    if reference_data is None:
        print("TokenWeave: skipped (its original files are not named: set LADDERSIM_SHARED to the folder "
              "holding reference_data/)", file=sys.stderr)
        return 0
    print_tokenweave(tokenweave(reference_data, "h100-sxm-nvswitch", args.framework))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
