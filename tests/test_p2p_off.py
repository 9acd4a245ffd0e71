"""NCCL_P2P_DISABLE=1 on an NVSwitch H100 node as NCCL's own rules decide it: NVLS kept for AllReduce
at 4-8 GPUs and refused at 2, the host-staged SHM ring without LL128, the switch's stated lines, the
paired runs the P2P-off constants are read from (laddersim.fitting.p2p_off_transport, printed by
tools/fits/fit_p2p_off_transport.py --lines), and the accuracy bar on the decode time P2P off adds
(the shipped development tables)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.costs import transport
from laddersim.costs.allreduce import allreduce_time_s
from laddersim.costs.collectives import bandwidth_share, collective_choice, slowdowns
from laddersim.costs.nccl_tuning import BASE_LATENCY_US
from laddersim.fitting import p2p_off_transport as fit_p2p
from laddersim.hardware.profile import load_profile
from laddersim.hardware.comm_specs import InterferencePoint
from laddersim.hardware.transport_spec import NvlsTerm
from laddersim.support.resources import data_path
from laddersim.validation.core import read_measured, validate
from laddersim.validation.p2p_pairs import p2p_off_pairs, pair_summary

KIB, MIB = 1024.0, 2.0**20
SIZES = np.geomspace(8.0, 2.0**30, 40)  # 8 B .. 1 GiB


@pytest.fixture(scope="module")
def off():
    return load_profile("h100-sxm-p2p-off")


@pytest.fixture(scope="module")
def on():
    return load_profile("h100-sxm-nvswitch")


def test_nvls_kept_under_p2p_off_at_4_to_8_gpus_and_refused_at_2(off):
    """NCCL's ncclNvlsInit enables NVLS without looking at P2P, never for 2 GPUs or fewer: with P2P
    disabled, 4-8 GPUs keep it as a candidate (and MiB messages go to it, NCCL costing it at 25 us
    against a host-staged ring), 2 GPUs only have the SHM ring, at every size."""
    assert off.collectives.transport.topology.p2p == "disabled"
    for gpus in (4, 5, 6, 7, 8):
        assert transport.nvls_allowed(off, gpus)
        assert ("nvls", "simple") in transport.candidates_s(off, gpus, SIZES, lambda s: s)
        assert collective_choice(off, gpus, 64 * MIB) == ("nvls", "simple")
    assert not transport.nvls_allowed(off, 2)
    assert set(transport.candidates_s(off, 2, SIZES, lambda s: s)) == {("ring", "ll"), ("ring", "simple")}
    assert {collective_choice(off, 2, float(s)) for s in SIZES} == {("ring", "ll"), ("ring", "simple")}
    # A node whose switch does not reduce (no nvls among its algorithms) has no NVLS at any count.
    no_switch = off.model_copy(update={"collectives": off.collectives.model_copy(update={"algorithms": ["ring", "tree"]})})
    assert not any(transport.nvls_allowed(no_switch, g) for g in (2, 4, 8))


def test_ll128_refused_across_the_cpu(off, on):
    """NCCL enables LL128 only on paths up to NVB (tuning.cc): under NCCL_P2P_DISABLE every GPU pair is
    routed through the CPU, so neither the real candidates nor NCCL's estimates hold LL128, and no
    size of any group picks it; P2P over NVLink (the same node with P2P on) offers it."""
    for gpus in (2, 4, 8):
        real = transport.candidates_s(off, gpus, SIZES, lambda s: s)
        estimates = transport.nccl_estimates_s(off, gpus, SIZES, real)
        assert not [key for key in (*real, *estimates) if key[1] == "ll128"]
        assert all(collective_choice(off, gpus, float(s))[1] != "ll128" for s in SIZES)
    assert transport.protocols("shm") == transport.protocols("p2p_pcie") == ("ll", "simple")
    assert "ll128" in transport.protocols("p2p_nvlink")
    assert any(collective_choice(on, 8, float(s))[1] == "ll128" for s in SIZES)


def test_profiles_show_lists_what_the_stated_transport_offers(capsys):
    """``laddersim profiles show``: a node under NCCL_P2P_DISABLE offers the SHM ring without LL128
    and NVLS above 2 GPUs; the same node with P2P (no transport stated) lists its fabric's protocols."""
    from cli_run import run_cli

    code, out, _ = run_cli(["profiles", "show", "h100-sxm-p2p-off"], capsys)
    line = next(l for l in out.splitlines() if l.startswith("offers.one_node"))
    assert code == 0 and "ring over shm (ll, simple), nvls (simple) above 2 GPUs" in line and "ll128" not in line
    code, out, _ = run_cli(["profiles", "show", "a100-pcie-nvlink-pairs"], capsys)
    line = next(l for l in out.splitlines() if l.startswith("offers.one_node"))
    assert "ring over p2p_nvlink (ll, ll128, simple), ring over shm (ll, simple)" in line


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.tuples(st.floats(1.0, 300.0), st.floats(1.0, 1000.0)), min_size=1, max_size=4),
       size=st.floats(1.0, 2.0**31))
def test_nvls_time_is_the_least_of_the_stated_lines_for_the_nearest_count(off, lines, size):
    """Several NVLS lines for one GPU count are a fitted curve: the time is the least of them at each
    size (closed form), and a count without its own lines takes the nearest count's (6 -> 8)."""
    spec = off.collectives.transport
    terms = [NvlsTerm(gpus=8, latency_us=a, bus_bandwidth_gb_per_s=b, source="test") for a, b in lines]
    terms.append(NvlsTerm(gpus=4, latency_us=1e6, bus_bandwidth_gb_per_s=1.0, source="test: far slower, never nearest"))
    profile = off.model_copy(update={"collectives": off.collectives.model_copy(update={"transport": spec.model_copy(
        update={"nvls": terms})})})
    moved = 2.0 * 5 / 6 * size
    expected = min(a * 1e-6 + moved / (b * 1e9) for a, b in lines)
    assert transport.nvls_s(profile, 6, np.array([size]))[0] == pytest.approx(expected, rel=1e-12)
    assert transport.nvls_bus_bandwidth_gb_per_s(profile, 6) == max(b for _, b in lines)


def test_paired_points_cancel_what_a_step_pays_once(on):
    """The decode point of a setting is standard's off-minus-on step time minus desync_half's, over
    the layers: one AllReduce a layer apart, so a per-step cost P2P off adds (the logits gather) cancels;
    prefill points divide each exposed schedule's prefill difference by its AllReduces."""
    base = {"model": "llama-3.1-8b", "tp": 8, "batch": 4, "prompt_len": 1024, "gen_len": 512}
    per_ar_s, per_step_s, per_ar_prefill_s = 30e-6, 200e-6, 90e-6
    rows = []
    for schedule, per_layer in (("standard", 2), ("desync_half", 1)):
        for p2p, on_side in (("on", True), ("off", False)):
            extra_step = 0.0 if on_side else 32 * per_layer * per_ar_s + per_step_s
            extra_prefill = 0.0 if on_side else 32 * per_layer * per_ar_prefill_s
            rows.append({**base, "schedule": schedule, "p2p": p2p, "decode_s": 5.0 + 512 * extra_step,
                         "prefill_s": 0.1 + extra_prefill})
    rows.append({**base, "schedule": "ladder", "p2p": "off", "decode_s": 1.0, "prefill_s": 1.0})  # hides: ignored
    points = fit_p2p.paired_allreduce_points(pd.DataFrame(rows), on)
    decode = points[points["phase"] == "decode"]
    assert len(decode) == 1 and decode["size_bytes"].iloc[0] == 4 * 4096 * 2
    assert decode["extra_us"].iloc[0] == pytest.approx(30.0)
    prefill = points[points["phase"] == "prefill"]
    assert len(prefill) == 2 and (prefill["size_bytes"] == 4 * 1024 * 4096 * 2).all()
    assert prefill["extra_us"].to_numpy() == pytest.approx([90.0, 90.0])
    on_us = allreduce_time_s(on, 8, np.array([4 * 4096 * 2.0]))[0] * 1e6
    assert decode["off_us"].iloc[0] == pytest.approx(on_us + 30.0)


def test_fit_lines_reads_the_simple_bandwidth_after_nccls_latency(on, off):
    """2 GPUs, MiB messages (NCCL's SHM Simple): the busbw is the moved bytes over the time left after
    NCCL's own Simple ring latency (8.4 us + 2 hops of the profile's 5.7 us)."""
    latency_us = BASE_LATENCY_US["ring"][2] + 2 * off.collectives.transport.shm.simple_hop_latency_us.value
    sizes = np.array([8.0, 32.0, 128.0]) * MIB
    points = pd.DataFrame({"tp": 2, "size_bytes": sizes, "off_us": latency_us + sizes / 12.5e3})
    fitted = fit_p2p.fit_lines(points, on, off)
    assert fitted["simple_bus_bandwidth_gb_per_s"] == pytest.approx(12.5)


def test_an_shm_rings_simple_keeps_its_speed_beside_compute(off):
    """An SHM ring's Simple (2 GPUs, MiB messages) moves through host memory at the host path's rate,
    which the GEMMs beside it do not use: no stretch. Its LL, NVLS and NVLink rings keep the profile's
    (1.5 x the bandwidth-bound share); the GEMMs' own slowdown is unchanged; a measured per-size curve
    (``by_size``) wins."""
    big, small = 64 * MIB, 64 * KIB
    assert collective_choice(off, 2, big) == ("ring", "simple")
    full = off.interference.compute_slowdown.value
    assert slowdowns(off, 2, big) == (pytest.approx(full), 0.0)
    assert collective_choice(off, 2, small) == ("ring", "ll")
    assert bandwidth_share(off, 2, small) > 0.4
    assert slowdowns(off, 2, small)[1] == pytest.approx(1.5 * bandwidth_share(off, 2, small))
    assert collective_choice(off, 8, big) == ("nvls", "simple") and bandwidth_share(off, 8, big) > 0.8
    assert slowdowns(off, 8, big)[1] == pytest.approx(1.5 * bandwidth_share(off, 8, big))
    paths = (("shm", "simple"), ("shm", "ll"), ("nvls", "simple"), ("p2p_nvlink", "simple"), ("p2p_pcie", "simple"))
    assert [transport.stretches_beside_compute(p, q) for p, q in paths] == [False, True, True, True, True]
    measured = off.model_copy(update={"interference": off.interference.model_copy(update={
        "collective_channels": None,
        "by_size": [InterferencePoint(size_bytes=1024, compute_slowdown=0.02, comm_slowdown=0.3, source="test"),
                    InterferencePoint(size_bytes=2**30, compute_slowdown=0.2, comm_slowdown=0.6, source="test")]})})
    assert slowdowns(measured, 2, big)[1] > 0.3


def test_the_profile_states_what_the_paired_runs_give(on, off):
    """h100-sxm-p2p-off's SHM Simple bandwidth and 8-GPU NVLS lines are what
    ``tools/fits/fit_p2p_off_transport.py --lines`` reads from the authors' paired runs (kept in step)."""
    fitted = fit_p2p.fit_lines(fit_p2p.paired_allreduce_points(read_measured(fit_p2p.PAIRED_TABLE), on), on, off)
    spec = off.collectives.transport
    assert spec.shm.simple_bus_bandwidth_gb_per_s.value == pytest.approx(fitted["simple_bus_bandwidth_gb_per_s"], abs=0.01)
    stated = sorted((t.latency_us, t.bus_bandwidth_gb_per_s) for t in spec.nvls if t.gpus == 8)
    assert np.allclose(stated, fitted["nvls"][8], rtol=1e-3)


def test_p2p_off_extra_decode_within_the_bar():
    """The decode time P2P off adds (off minus on, per pair) within 15%, median over the pairs where it
    is >= 3% of the P2P-on decode (the 70B figure and both CUDA-graph tables, shipped profiles)."""
    tables = [validate(read_measured(data_path("validation", name)))
              for name in ("ladder_70b_tp_sweep.csv", "ladder_flash_p2p_sweep.csv", "ladder_graph_p2p_sweep.csv")]
    summary = pair_summary(pd.concat([p2p_off_pairs(t) for t in tables], ignore_index=True))
    assert summary["scored_pairs"] >= 80
    assert summary["extra_decode_median_abs_err_pct"] <= 15.0, summary


def test_ladder_prefill_over_an_shm_ring_as_the_paired_runs_measure_it():
    """TP 2 with P2P off (no NVLS for 2 GPUs): the prefill's 8-128 MiB AllReduces run the SHM ring's
    Simple, which ladder overlaps with the next module's GEMMs. The authors' runs
    (ladder_flash_p2p_sweep.csv) are met within 10%; stretched as an NVLink ring is beside compute
    (1.5 x), ladder's prefill was predicted 17-23% too slow, standard's (nothing overlapped) within 2%."""
    rows = read_measured(fit_p2p.PAIRED_TABLE)
    rows = rows[(rows["tp"] == 2) & (rows["p2p"] == "off") & rows["schedule"].isin(["ladder", "standard"])]
    out = validate(rows)
    err = out["predicted_prefill_s"] / out["prefill_s"] - 1.0
    assert (out["schedule"] == "ladder").sum() >= 4
    assert err.abs().max() < 0.10, out.assign(err=err)[["batch", "gen_len", "schedule", "err"]]


def test_extra_per_allreduce_divides_the_step_difference_by_the_steps_allreduces():
    base = {"model": "llama-3.1-8b", "tp": 8, "batch": 16, "prompt_len": 1024, "gen_len": 512, "schedule": "standard"}
    frame = pd.DataFrame([
        {**base, "p2p": "on", "tokens_per_s": 1.0, "predicted_tokens_per_s": 1.0, "decode_s": 5.12,
         "predicted_decode_s": 5.12},
        # off adds 1 ms a step: 64 AllReduces (32 layers x 2), 15.625 us each; predicted half of it
        {**base, "p2p": "off", "tokens_per_s": 1.0, "predicted_tokens_per_s": 1.0, "decode_s": 5.12 + 0.512,
         "predicted_decode_s": 5.12 + 0.256},
        {**base, "p2p": "off", "schedule": "ladder", "tokens_per_s": 1.0, "predicted_tokens_per_s": 1.0,
         "decode_s": 9.0, "predicted_decode_s": 9.0},  # not the standard schedule: ignored
    ])
    out = fit_p2p.extra_per_allreduce(frame)
    assert len(out) == 1
    row = out.iloc[0]
    assert row["message_kib"] == 16 * 4096 * 2 / 1024
    assert row["measured_extra_us"] == pytest.approx(15.625)
    assert row["predicted_extra_us"] == pytest.approx(7.8125)


def test_extra_per_allreduce_without_decode_s_amortizes_from_tokens_per_s():
    base = {"model": "llama-3.1-70b", "tp": 8, "batch": 4, "prompt_len": 1024, "gen_len": 512, "schedule": "standard"}
    frame = pd.DataFrame([{**base, "p2p": "on", "tokens_per_s": 400.0, "predicted_tokens_per_s": 400.0},
                          {**base, "p2p": "off", "tokens_per_s": 200.0, "predicted_tokens_per_s": 250.0}])
    row = fit_p2p.extra_per_allreduce(frame).iloc[0]
    assert row["measured_extra_us"] == pytest.approx((4 / 200 - 4 / 400) / 160 * 1e6)  # 80 layers x 2
    assert row["predicted_extra_us"] == pytest.approx((4 / 250 - 4 / 400) / 160 * 1e6)
