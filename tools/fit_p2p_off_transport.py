"""Fit the two constants of h100-sxm-p2p-off's SHM transport that no public table pins on an H100
host, to the decode time P2P off adds over P2P on in the authors' paired runs
(../shared/validation/ladder_flash_p2p_sweep.csv, standard schedule only: it hides nothing, so its
extra is the transport's cost alone; the other schedules stay held out):

* ``shm.ll_bus_bandwidth_gbps``: what LL really moves through host memory;
* ``nccl_graph.channels x pcie_link_gbps``: the bus bandwidth NCCL's tuner believes the SHM path
  has, which decides where it leaves the SHM ring for NVLS.

A grid over both; the objective is the median absolute error of the predicted extra decode time
over the pairs where P2P off adds >= 3% (laddersim.validation.p2p_pairs). Prints the grid and the
best point. Needs ../shared; writes nothing.

``--by-size`` fits nothing: it prints, per TP and AllReduce message size, the time P2P off adds
to each AllReduce of the standard schedule (off minus on step time / AllReduces per step),
measured and predicted, for the 70B figure (step time from tokens/s: prefill amortized in) and the
flash table (decode_s / gen_len): where the transport's size curve is off.

    PYTHONPATH=$PWD python tools/fit_p2p_off_transport.py [--shared ../shared] [--by-size]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from laddersim.hardware.profile import load_profile
from laddersim.model_shape import load_model_shape
from laddersim.validation.core import ValidationSetup, read_measured, validate
from laddersim.validation.p2p_pairs import p2p_off_pairs, pair_summary

LL_GRID_GBPS = (2.75, 4.0, 5.0, 6.5, 9.1)  # from the public tables' fitted range (tools/fit_shm_transport.py)
GRAPH_GRID = ((12.0, 1), (12.0, 2), (24.0, 2), (48.0, 2))  # (NCCL link GB/s, channels)


def with_constants(profile, ll_gbps: float, link_gbps: float, channels: int):
    transport = profile.collectives.transport
    shm = transport.shm.model_copy(update={"ll_bus_bandwidth_gbps": transport.shm.ll_bus_bandwidth_gbps.model_copy(
        update={"value": ll_gbps})})
    graph = transport.nccl_graph.model_copy(update={
        "pcie_link_gbps": transport.nccl_graph.pcie_link_gbps.model_copy(update={"value": link_gbps}),
        "channels": transport.nccl_graph.channels.model_copy(update={"value": float(channels)})})
    collectives = profile.collectives.model_copy(update={"transport": transport.model_copy(
        update={"shm": shm, "nccl_graph": graph})})
    return profile.model_copy(update={"collectives": collectives})


def extra_per_allreduce(frame: pd.DataFrame, dtype_bytes: int = 2) -> pd.DataFrame:
    """Per setting measured with P2P on and off (``validate`` output, standard schedule): the step
    time P2P off adds divided by the step's AllReduces (2 a layer), measured and predicted, in us,
    with the AllReduce message (batch x hidden x dtype bytes). Step time: ``decode_s / gen_len``
    where the table has decode_s, else ``batch / tokens_per_s`` (the prefill amortized in)."""
    frame = frame[frame["schedule"] == "standard"].copy()
    has_decode = "decode_s" in frame.columns
    for side, tokens, decode in (("measured", "tokens_per_s", "decode_s"),
                                 ("predicted", "predicted_tokens_per_s", "predicted_decode_s")):
        step = frame["batch"] / frame[tokens]
        if has_decode:
            step = (frame[decode] / frame["gen_len"]).where(frame["decode_s"].notna(), step)
        frame[f"{side}_step_s"] = step
    keys = ["model", "tp", "batch", "prompt_len", "gen_len"]
    on = frame[frame["p2p"] == "on"].set_index(keys)
    off = frame[frame["p2p"] == "off"].set_index(keys)
    both = on.index.intersection(off.index)
    rows = []
    for key in both:
        model = load_model_shape(key[0])
        per_step = 2 * model.n_layers
        rows.append({"model": Path(key[0]).name.removesuffix(".json"), "tp": key[1], "batch": key[2],
                     "gen_len": key[4], "message_kib": key[2] * model.dim * dtype_bytes / 1024,
                     **{f"{side}_extra_us": (off.loc[key, f"{side}_step_s"] - on.loc[key, f"{side}_step_s"])
                        / per_step * 1e6 for side in ("measured", "predicted")}})
    columns = ["model", "tp", "batch", "gen_len", "message_kib", "measured_extra_us", "predicted_extra_us"]
    out = pd.DataFrame(rows, columns=columns)
    return out.sort_values(["tp", "message_kib", "model", "gen_len"]).reset_index(drop=True)


def by_size(shared: Path) -> None:
    tables = {"ladder_70b_tp_sweep.csv": "gpt-fast", "ladder_flash_p2p_sweep.csv": "gpt-fast-flash"}
    frames = []
    for name, framework in tables.items():
        measured = read_measured(shared / "validation" / name)
        measured = measured[(measured["schedule"] == "standard") & (measured["tp"] > 1)].reset_index(drop=True)
        frames.append(extra_per_allreduce(validate(measured, ValidationSetup(framework=framework))))
    print(pd.concat(frames, ignore_index=True).sort_values(["tp", "message_kib"]).to_string(
        index=False, float_format=lambda v: f"{v:.1f}"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", default=str(Path(__file__).resolve().parents[1].parent / "shared"))
    parser.add_argument("--by-size", action="store_true",
                        help="print the extra per AllReduce by TP and size; fit nothing")
    args = parser.parse_args()
    if args.by_size:
        by_size(Path(args.shared))
        return
    measured = read_measured(Path(args.shared) / "validation" / "ladder_flash_p2p_sweep.csv")
    measured = measured[measured["schedule"] == "standard"].reset_index(drop=True)
    on = validate(measured[measured["p2p"] == "on"].reset_index(drop=True))
    base = load_profile("h100-sxm-p2p-off")
    rows = []
    for ll in LL_GRID_GBPS:
        for link, channels in GRAPH_GRID:
            setup = ValidationSetup(hardware_p2p_off=with_constants(base, ll, link, channels))
            off = validate(measured[measured["p2p"] == "off"].reset_index(drop=True), setup)
            summary = pair_summary(p2p_off_pairs(pd.concat([on, off], ignore_index=True)))
            rows.append({"ll_gbps": ll, "nccl_link_gbps": link, "channels": channels, **summary})
            print(rows[-1], flush=True)
    grid = pd.DataFrame(rows).sort_values("extra_decode_median_abs_err_pct")
    print(grid.to_string(index=False))
    print("best:", grid.iloc[0].to_dict())


if __name__ == "__main__":
    main()
