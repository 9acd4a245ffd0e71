"""The SHM transport's LL bandwidth from a measured host-memory round trip (issue 29), and the
program that measures it (calibration/host_link_bench.py, GPU only: its CPU behaviour is tested)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from laddersim.hardware.profile import load_profile

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "hardware_profiles" / "tables" / "host_link_h200.csv"
LL_THREADS = 512  # NCCL_LL_MAX_NTHREADS: one 16-byte line (8 data bytes) each per round trip
RUNTIME_CHANNELS = 2  # the search's one SHM ring, duplicated at run time


def host_read_round_trip_us() -> float:
    """The slope of one 4 KiB-per-iteration block's loads from host memory, 1-8 MiB: one round trip."""
    table = pd.read_csv(TABLE, comment="#")
    rows = table[(table["path"] == "sm_load") & (table["ctas"] == 1) & (table["bytes"] >= 2 ** 20)]
    return float(np.polyfit(rows["bytes"], rows["us"], 1)[0] * 4096)


def test_reads_of_host_memory_are_latency_bound_per_block():
    """Loads from host memory: each block waits a round trip per 4 KiB, so bandwidth grows with the
    blocks (1, 2, 4: x1, x2, x4 within 10%) while stores (posted writes) reach the link's ~50 GB/s."""
    table = pd.read_csv(TABLE, comment="#")
    big = table[table["bytes"] == 2 ** 23].set_index(["path", "ctas"])["gbps"]
    for ctas in (2, 4):
        assert big[("sm_load", ctas)] == pytest.approx(ctas * big[("sm_load", 1)], rel=0.10)
    assert 1.0 < host_read_round_trip_us() < 2.0
    assert big[("sm_store", 16)] > 10 * big[("sm_load", 1)]


@pytest.mark.parametrize("name", ["h100-sxm-p2p-off", "h100-pcie", "l40s-pcie", "a100-pcie-nvlink-pairs"])
def test_ll_bus_bandwidth_is_the_round_trip_mechanism(name):
    """ll_bus_bandwidth_gb_per_s = channels x 512 LL threads x 8 data bytes / the measured round trip."""
    shm = load_profile(name).collectives.transport.shm
    derived_gbps = RUNTIME_CHANNELS * LL_THREADS * 8 / (host_read_round_trip_us() * 1e-6) / 1e9
    assert shm.ll_bus_bandwidth_gb_per_s.value == pytest.approx(derived_gbps, rel=0.005)
    assert "host_link_h200.csv" in shm.ll_bus_bandwidth_gb_per_s.source


def test_host_link_bench_refuses_bad_input_and_needs_a_gpu(tmp_path):
    bench = REPO / "calibration" / "host_link_bench.py"
    bad = subprocess.run([sys.executable, str(bench), "--ctas", "0,x", "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--ctas" in bad.stderr
    cpu = subprocess.run([sys.executable, str(bench), "--out", str(tmp_path / "o")], capture_output=True, text=True,
                         env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert cpu.returncode == 2 and "needs a CUDA GPU" in cpu.stderr and "Traceback" not in cpu.stderr
