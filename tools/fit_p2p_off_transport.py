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

    PYTHONPATH=$PWD python tools/fit_p2p_off_transport.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from laddersim.hardware.profile import load_profile
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", default=str(Path(__file__).resolve().parents[1].parent / "shared"))
    args = parser.parse_args()
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
