"""Fit ``framework.graph_host_node_us`` of h100-sxm-nvswitch to the authors' 405B two-node rows
(laddersim.fitting.graph_host_node says how): prints what each batch and schedule asks for, the fit,
and the rows' errors at 0 and at the fitted value; writes nothing.

    PYTHONPATH=$PWD python tools/fits/fit_graph_host_node.py [--table T] [--profile P]
"""

from __future__ import annotations

import argparse

from laddersim.fitting.graph_host_node import PROFILE, TABLE, asked_us, errors_at, fitted_us
from laddersim.validation.core import read_measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(TABLE), help="rows of graph-captured network collectives with "
                        "ladder, standard and upper_bound at each setting (default: the shipped 405B table)")
    parser.add_argument("--profile", default=PROFILE, help=f"the profile whose field is fitted (default {PROFILE})")
    args = parser.parse_args(argv)
    rows = read_measured(args.table)
    asked = asked_us(rows, args.profile)
    fitted = fitted_us(asked)
    print("per collective, measured minus predicted at 0 (us; ladder: the fit, standard and parallel: held out):")
    print(asked.round(2).to_string())
    print(f"fit: median of the ladder column = {fitted:.2f} us")
    for value in (0.0, round(fitted, 2)):
        e = errors_at(rows, value, args.profile)
        print(f"at {value:.2f} us: tokens/s median {e['tokens_per_s_median_abs_err_pct']:.2f}%, speedup median "
              f"{e['speedup_median_abs_err_pp']:.2f} pp, worst {e['speedup_worst_abs_err_pp']:.2f} pp, "
              f"prefill median {e['prefill_median_abs_err_pct']:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
