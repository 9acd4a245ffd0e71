"""What Ladder gives a mixture-of-experts model: decode tokens/s of the standard and ladder schedules for
Mixtral-8x22B (the Ladder Residual authors' MoE shape) and Qwen3-235B-A22B at TP 8 on 8x H100 and
8x H200, batch 1-64, as a markdown table (shipped profiles, no fit); and the MoE validation rows
(laddersim.validation.moe_rows) with each table's median |error|; with --serving, the rows priced
through the serving simulator (laddersim.validation.moe_serving), median |error| per table and GPU.

    PYTHONPATH=$PWD python tools/dev/moe_ladder_table.py [--framework gpt-fast] [--validation] [--serving [GPU ...]]
"""

from __future__ import annotations

import argparse

import numpy as np

from laddersim.errors import UserInputError
from laddersim.simulation.results import summarize
from laddersim.simulation.simulate import make_scenario, simulate
from laddersim.support.resources import data_path

MODELS = {"Mixtral-8x22B": "mistralai--Mixtral-8x22B-v0.1.json", "Qwen3-235B-A22B": "Qwen--Qwen3-235B-A22B.json"}
PROFILES = ("h100-sxm-nvswitch", "h200-sxm-nvswitch")


def ladder_rows(framework: str, batches=(1, 4, 16, 64), prompt_len: int = 1024, gen_len: int = 256) -> list[str]:
    lines = ["| model | hardware | batch | standard decode tok/s | ladder decode tok/s | ladder decode speedup | "
             "standard exposed comm (% of run) |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, file in MODELS.items():
        path = str(data_path("validation", "moe", "models", file))
        for profile in PROFILES:
            for batch in batches:
                try:
                    s, l = (summarize(simulate(make_scenario(model=path, hardware=profile, tp=8, batch=batch,
                                                            prompt_len=prompt_len, gen_len=gen_len, schedule=sched,
                                                            framework=framework)))
                            for sched in ("standard", "ladder"))
                except UserInputError as exc:
                    lines.append(f"| {name} | {profile} | {batch} | {str(exc)[:60]} | | | |")
                    continue
                exposed = 100 * s["exposed_comm_s"] / s["total_s"]
                lines.append(f"| {name} | {profile} | {batch} | {batch / s['tpot_s']:.1f} | {batch / l['tpot_s']:.1f} | "
                             f"{s['tpot_s'] / l['tpot_s']:.3f}x | {exposed:.1f}% |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="gpt-fast")
    parser.add_argument("--validation", action="store_true", help="print the MoE validation rows instead")
    parser.add_argument("--serving", nargs="*", metavar="GPU", help="print the serving-priced MoE rows instead "
                        "(TensorRT-LLM rows of these GPUs as the table names them; none given: all)")
    args = parser.parse_args(argv)
    if args.serving is not None:
        from laddersim.validation.moe_serving import moe_serving_rows

        rows, skipped = moe_serving_rows(tuple(args.serving) or None)
        print(rows.drop(columns=["table", "framework"]).to_string(index=False))
        for (table, gpu), group in rows.groupby(["table", "gpu"]):
            print(f"{table} {gpu}: {len(group)} rows priced, median |error| "
                  f"{100 * float(np.median(np.abs(group['error'].astype(float)))):.1f}%")
        for reason, group in (skipped.groupby("reason") if len(skipped) else ()):
            print(f"skipped {len(group)} rows: {reason}")
        return 0
    if args.validation:
        from laddersim.validation.moe_rows import moe_validation_rows

        rows = moe_validation_rows()
        print(rows.drop(columns=["table"]).to_string(index=False))
        for table, group in rows.groupby("table"):
            errors = group["error"].dropna().astype(float)
            print(f"{table}: {len(errors)} rows priced, median |error| {100 * float(np.median(np.abs(errors))):.1f}%")
        return 0
    print("\n".join(ladder_rows(args.framework)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
