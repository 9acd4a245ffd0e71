"""The fits that shipped profile constants cite (``tools/fits/*.py`` print them; the fitting is
laddersim.fitting's): each reproduces the value its profile states, from the shipped tables."""

from __future__ import annotations

import pandas as pd
import pytest

from laddersim.fitting import load_latency
from laddersim.fitting.public_tables import LL_BASE_US, fit_shm_transport, read_shm_tables
from laddersim.hardware.profile import load_profile
from laddersim.validation.core import read_measured


@pytest.fixture(scope="module")
def shm_fit():
    return fit_shm_transport(read_shm_tables())


def test_shm_hop_latency_is_what_the_profiles_state(shm_fit):
    """Every profile with an SHM ring states the least-squares LL hop over the public SHM tables'
    latency floors (2.208 us, stated as 2.21) and cites the script that prints it."""
    for name in ("h100-sxm-p2p-off", "h100-pcie", "l40s-pcie", "a100-pcie-nvlink-pairs"):
        stated = load_profile(name).collectives.transport.shm.ll_hop_latency_us
        assert stated.value == pytest.approx(round(shm_fit["ll_hop_latency_us"], 2), abs=1e-9), name
        assert "tools/fits/fit_shm_transport.py" in stated.source


def test_shm_simple_bandwidth_of_an_h100_host_is_what_h100_pcie_states(shm_fit):
    stated = load_profile("h100-pcie").collectives.transport.shm.simple_bus_bandwidth_gb_per_s.value
    assert stated == pytest.approx(shm_fit["h100_simple_bus_bandwidth_gb_per_s"], abs=0.01)


def test_shm_fit_by_hand_on_two_tables():
    """Two tables made of the priced line itself: the hop and the LL bandwidth come back, and the
    H100 table's Simple bandwidth is its rows' median busbw."""
    rows = []
    for table, gpus in (("a", 2), ("b", 4)):
        for size in (8.0, 512.0, 8192.0, 32768.0, 131072.0):
            moved = 2.0 * (gpus - 1) / gpus * size
            rows.append({"table": table, "gpus": gpus, "size_bytes": size,
                         "time_us": LL_BASE_US + 2 * (gpus - 1) * 3.0 + moved / 5e3})  # 3 us hops, 5 GB/s
    for size, busbw_gbps in ((2.0**30, 20.0), (2.0**31, 24.0), (2.0**32, 30.0)):
        rows.append({"table": "dgxh100_4gpu_p2p_disabled", "gpus": 4, "size_bytes": size,
                     "time_us": 1.5 * size / (busbw_gbps * 1e3)})
    frame = pd.DataFrame(rows)
    frame["moved_bytes"] = 2.0 * (frame["gpus"] - 1) / frame["gpus"] * frame["size_bytes"]
    fit = fit_shm_transport(frame[frame["table"] != "dgxh100_4gpu_p2p_disabled"])
    assert fit["ll_hop_latency_us"] == pytest.approx(3.0, abs=1e-3)  # the floors also move 8 B
    assert fit["ll_bus_bandwidth_gb_per_s"] == pytest.approx(5.0, rel=1e-6)
    assert fit_shm_transport(frame)["h100_simple_bus_bandwidth_gb_per_s"] == pytest.approx(24.0)


def test_the_fmha_round_trip_is_the_grids_pick():
    """h100-sxm-nvswitch's ``gpu.global_load_latency_us`` is the latency of least RMS decode error
    over the September runs' TP 1 P2P-on rows (tools/fits/fit_fmha_latency.py)."""
    grid = load_latency.latency_grid(load_latency.fit_rows(read_measured(load_latency.TABLE)))
    stated = load_profile("h100-sxm-nvswitch").gpu.global_load_latency_us
    assert load_latency.picked_latency_us(grid) == pytest.approx(stated.value)
    assert "tools/fits/fit_fmha_latency.py" in stated.source
    assert grid["rms_pct"].min() < 3.5 < grid["rms_pct"].max()  # the grid brackets a real minimum


def test_the_grid_pick_takes_the_smaller_latency_on_a_tie():
    grid = pd.DataFrame({"latency_us": [0.8, 0.9, 1.0], "rms_pct": [2.0, 1.0, 1.0]})
    assert load_latency.picked_latency_us(grid) == 0.9
