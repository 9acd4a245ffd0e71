"""Section 4: a planning example. Serving Llama-3.1-70B on one 8-GPU H100 node: which TP degree,
batch size and schedule give the most tokens per dollar within a per-token latency target?

Computed here from plain ``simulate`` calls (one per configuration); the GPU price is an
assumption, stated in the report, not a measurement.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from laddersim.errors import DoesNotFitError
from laddersim.hardware import load_profile
from laddersim.plots import plot_breakdown, plot_heatmap
from laddersim.report.markdown import Section, code, figure_link, table
from laddersim.simulate import make_scenario, simulate

MODEL, HARDWARE, PROMPT_LEN, GEN_LEN = "llama-3.1-70b", "h100-sxm-nvswitch", 1024, 512
TPS = (2, 4, 8)
BATCHES = (1, 16, 64)
SCHEDULES = ("standard", "ladder")
TPOT_TARGET_S = 0.025  # interactive-chat style target: 25 ms per generated token (40 tokens/s per user)
GPU_HOUR_USD = 2.50  # assumption (cloud prices for one H100 SXM vary widely), US dollars


def simulate_configurations() -> pd.DataFrame:
    """A results table (the columns ``laddersim sweep`` writes): one row per (TP, batch, schedule),
    status ``ok`` with the summary metrics, or ``infeasible`` when it does not fit in memory."""
    rows = []
    for tp in TPS:
        for batch in BATCHES:
            for schedule in SCHEDULES:
                inputs = {"model": MODEL, "hardware": HARDWARE, "tp": tp, "batch": batch,
                          "prompt_len": PROMPT_LEN, "gen_len": GEN_LEN, "schedule": schedule}
                try:
                    summary = simulate(make_scenario(MODEL, HARDWARE, tp, batch, PROMPT_LEN, GEN_LEN, schedule)).summary()
                except DoesNotFitError as exc:
                    rows.append(inputs | {"status": "infeasible", "error": str(exc)})
                    continue
                rows.append(summary | inputs | {"status": "ok", "error": None})
    return pd.DataFrame(rows)


def plan_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: fit, latency, node throughput, cost per million tokens, target met."""
    gpus_per_node = int(load_profile(HARDWARE).node.gpus_per_node)
    rows = []
    for r in results.itertuples(index=False):
        row = {"TP": r.tp, "batch": r.batch, "schedule": r.schedule}
        if r.status != "ok":
            rows.append(row | {"fits": "no"})
            continue
        replicas = gpus_per_node // r.tp  # independent TP groups on one node
        node_tokens_per_s = replicas * r.tokens_per_s
        rows.append(row | {
            "fits": "yes",
            "ms/token": r.tpot_s * 1e3,
            "replicas/node": replicas,
            "node tokens/s": node_tokens_per_s,
            "USD per 1M tokens": gpus_per_node * GPU_HOUR_USD / (node_tokens_per_s * 3600) * 1e6,
            "meets target": "yes" if r.tpot_s <= TPOT_TARGET_S else "no",
        })
    return pd.DataFrame(rows)


def _planner_ranking(results: pd.DataFrame) -> list[str]:
    """The same configurations ranked by the project's planner, when ``laddersim.plan`` is installed.

    The planner counts decode-phase throughput only and prices GPUs from its own sourced price file,
    so its numbers differ from the table above by design.
    """
    try:
        from laddersim.plan import Target, load_prices, rank_options
    except ImportError:  # the planner is an optional part of the package
        return []
    price = load_prices().prices.get(HARDWARE)
    if price is None:
        return []
    options = rank_options(results.to_dict("records"), {HARDWARE: price.usd_per_gpu_hour},
                           Target(max_token_latency_ms=TPOT_TARGET_S * 1e3))
    if not options:
        return []
    ranked = pd.DataFrame([{"schedule": o.schedule, "TP": o.tp, "batch": o.batch, "ms/token": o.tpot_s * 1e3,
                            "tokens/s per user": o.user_tokens_per_s, "tokens/s": o.total_tokens_per_s,
                            "USD/hour": o.usd_per_hour, "USD per 1M tokens": o.usd_per_million_tokens}
                           for o in options[:5]])
    return [
        "",
        f"The project's planner (`laddersim.plan`) ranks the same configurations its own way: decode-phase "
        f"throughput only, paying for the GPUs a replica uses, at USD {price.usd_per_gpu_hour:.2f} per GPU-hour "
        f"from its price file ({price.source}, {price.date}). Its five cheapest within the target:",
        "",
        table(ranked, {"ms/token": "{:.1f}", "tokens/s per user": "{:.1f}", "tokens/s": "{:.0f}",
                       "USD/hour": "{:.2f}", "USD per 1M tokens": "{:.2f}"}),
    ]


def planning_section(out_dir: Path, figures_dir: Path) -> Section:
    results = simulate_configurations()
    frame = plan_table(results)
    ok = frame[frame["meets target"] == "yes"]
    breakdown = plot_breakdown(results, figures_dir / "plan_70b_time_breakdown",
                               title="Where the time goes in one request (rank 0)")
    heatmap = plot_heatmap(results, figures_dir / "plan_70b_ladder_speedup", title="Ladder speedup over standard")
    parts = [
        f"*Computed from `simulate` calls, one per configuration; the GPU price is an assumption "
        f"(USD {GPU_HOUR_USD:.2f} per GPU-hour), not a measurement.* Serving {MODEL} on one 8-GPU "
        f"`{HARDWARE}` node, prompt {PROMPT_LEN}, {GEN_LEN} new tokens per request, latency target "
        f"{TPOT_TARGET_S * 1e3:.0f} ms per generated token. A node runs 8 / TP independent replicas.",
        "",
        table(frame, {"ms/token": "{:.1f}", "replicas/node": "{:.0f}", "node tokens/s": "{:.0f}",
               "USD per 1M tokens": "{:.2f}"}),
        "",
    ]
    if ok.empty:
        parts.append("No configuration meets the latency target.")
    else:
        best = ok.sort_values(["USD per 1M tokens", "TP", "batch"]).iloc[0]
        parts.append(f"Cheapest within the target: **TP {best['TP']}, batch {best['batch']}, {best['schedule']}** "
                     f"at {best['ms/token']:.1f} ms/token and USD {best['USD per 1M tokens']:.2f} per million tokens.")
        for schedule in SCHEDULES:
            mine = ok[ok["schedule"] == schedule]
            if not mine.empty:
                top = mine.sort_values(["USD per 1M tokens", "TP", "batch"]).iloc[0]
                parts.append(f"- best with {schedule}: TP {top['TP']}, batch {top['batch']}, "
                             f"USD {top['USD per 1M tokens']:.2f} per million tokens")
    parts += _planner_ranking(results)
    parts += [
        "",
        figure_link(breakdown[0], out_dir, "time breakdown per TP and schedule"),
        "",
        figure_link(heatmap[0], out_dir, "ladder speedup over TP x batch"),
        "",
        "**How to read this.** Larger batches amortise the weight reads and cut the cost per token but "
        "lengthen every step; higher TP shortens the step but spends more GPUs per replica and more time in "
        "AllReduces, which is where ladder's overlap pays. 'fits: no' rows need more memory per GPU than the "
        "profile allows (weights, KV cache, activations). Change the price or the target and the answer moves; "
        "the tokens/s and latencies do not. The stacked bars split one request's time into compute, "
        "communication left exposed, and fixed per-step overhead: ladder's bars lose most of their red. "
        "The heatmap is ladder's speedup over standard at each TP and batch ('no fit': out of memory).",
        "",
        "Reproduce one row:",
        "",
        code([f"laddersim simulate --model {MODEL} --hardware {HARDWARE} --tp 8 --batch 16 "
              f"--prompt-len {PROMPT_LEN} --gen-len {GEN_LEN} --schedule standard --schedule ladder"]),
    ]
    return Section("4. Planning example: serving Llama-3.1-70B on one node", "\n".join(parts), breakdown + heatmap)
