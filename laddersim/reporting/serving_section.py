"""Section: serving under load. Llama-3.1-70B at TP 8 on H100 with NVSwitch and with P2P off:
one replica's latency percentiles, goodput against request rate and capacity within SLOs,
standard vs ladder (laddersim.traffic, the numbers ``laddersim serving`` prints)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from laddersim.plots.serving import plot_goodput_vs_rate, plot_latency_cdfs
from laddersim.reporting.markdown import Section, code, figure_link, table
from laddersim.traffic.arrivals import draw_requests, parse_length
from laddersim.traffic.capacity import OfferedLoad, max_sustainable_rate
from laddersim.traffic.options import serving_options
from laddersim.traffic.run import serve, serving_scenario

MODEL, TP = "llama-3.1-70b", 8
HARDWARE = ("h100-sxm-nvswitch", "h100-sxm-p2p-off")
SCHEDULES = ("standard", "ladder")
PROMPT, OUTPUT = "1024", "256"
REQUESTS = 150
CDF_RATE = 6.0
TTFT_SLO_S, TPOT_SLO_S = 0.5, 0.03
SEED = 0


def serving_section(out_dir: Path, figures_dir: Path) -> Section:
    options = serving_options(ttft_slo_s=TTFT_SLO_S, tpot_slo_s=TPOT_SLO_S)
    prompt, output = parse_length(PROMPT, "prompt-len"), parse_length(OUTPUT, "gen-len")
    load = OfferedLoad(REQUESTS, prompt, output, SEED)
    curve, frames, rows, capacities = [], [], [], {}
    for hardware in HARDWARE:
        for schedule in SCHEDULES:
            scenario = serving_scenario(MODEL, hardware, TP, schedule)
            result = serve(scenario, draw_requests(REQUESTS, CDF_RATE, prompt, output, SEED), options)
            frames.append(result.frame.assign(hardware=hardware, schedule=schedule))
            # The goodput curve is the capacity search's own points (each a full simulation).
            cap = max_sustainable_rate(scenario, options, load, start_rate=CDF_RATE, rel_tol=0.1)
            capacities[hardware, schedule] = cap.rate
            rows.append({"hardware": hardware, "schedule": schedule, **result.metrics, "capacity": cap.rate})
            curve += [{"hardware": hardware, "schedule": schedule, "rate": rate, **metrics}
                      for rate, metrics in cap.tried]
    cdfs = plot_latency_cdfs(pd.concat(frames, ignore_index=True), figures_dir / "serving_70b_latency_cdf",
                             ttft_slo_s=TTFT_SLO_S, tpot_slo_s=TPOT_SLO_S,
                             title=f"{MODEL}, TP {TP}, {CDF_RATE:g} requests/s")
    goodput = plot_goodput_vs_rate(pd.DataFrame(curve), figures_dir / "serving_70b_goodput",
                                   slo_attainment=options.slo_attainment, capacities=capacities,
                                   title=f"{MODEL}, TP {TP}: goodput within TTFT {TTFT_SLO_S * 1e3:.0f} ms "
                                         f"and TPOT {TPOT_SLO_S * 1e3:.0f} ms")
    frame = pd.DataFrame([{
        "hardware": r["hardware"], "schedule": r["schedule"], "TTFT p50 ms": r["ttft_p50_s"] * 1e3,
        "TTFT p99 ms": r["ttft_p99_s"] * 1e3, "TPOT p50 ms": r["tpot_p50_s"] * 1e3,
        "TPOT p99 ms": r["tpot_p99_s"] * 1e3, "goodput req/s": r["goodput_req_per_s"],
        "capacity req/s": r["capacity"]} for r in rows])
    command = (f"laddersim serving --model {MODEL} --hardware h100-sxm-p2p-off --tp {TP} --rate {CDF_RATE:g} "
               f"--requests {REQUESTS} --prompt-len {PROMPT} --gen-len {OUTPUT} --ttft-slo-s {TTFT_SLO_S:g} "
               f"--tpot-slo-s {TPOT_SLO_S:g} --capacity")
    body = "\n".join([
        f"One replica of {MODEL} at TP {TP} serving {REQUESTS} requests (Poisson arrivals, prompt {PROMPT} and "
        f"{OUTPUT} output tokens) with vLLM-style continuous batching (at most {options.max_running} running "
        f"sequences, {options.max_batched_tokens} tokens per iteration, paged KV cache sized from the memory "
        f"model). Every iteration's time is the step simulator's for that iteration's shape. SLOs: time to "
        f"first token {TTFT_SLO_S * 1e3:.0f} ms and time per output token {TPOT_SLO_S * 1e3:.0f} ms; a rate "
        f"is sustained when {options.slo_attainment:.0%} of requests meet both. At {CDF_RATE:g} requests/s:",
        "",
        table(frame, {"TTFT p50 ms": "{:.0f}", "TTFT p99 ms": "{:.0f}", "TPOT p50 ms": "{:.1f}",
                      "TPOT p99 ms": "{:.1f}", "goodput req/s": "{:.2f}", "capacity req/s": "{:.2f}"}),
        "",
        figure_link(cdfs[0], out_dir, "latency CDFs, standard and ladder, per fabric"),
        "",
        figure_link(goodput[0], out_dir, "goodput and SLO attainment against request rate"),
        "",
        "**How to read this.** Under load the faster decode step does more than shorten each token: "
        "the running batch drains sooner, so queued requests start sooner and the time to first token "
        "falls too. The capacity (dotted lines) is the highest rate whose requests still meet the SLOs; "
        "the GPUs and cost for a target rate follow from it (`--capacity --target-rate R`). "
        "Iteration times are exact at the token counts this workload produces except between grid "
        "points of the token axis, where the bound is stated per run (`iteration_error_bound`).",
        "",
        "Reproduce the P2P-off rows (the command searches the capacity to 2%, the table to 10%):",
        "",
        code([command]),
    ])
    return Section("6. Serving under load: Llama-3.1-70B, TP 8", body, cdfs + goodput)
