"""h100-sxm-p2p-off's intra-node constants that no public table pins on an H100 host, fitted to the
authors' paired P2P on/off runs (``laddersim/data/validation/ladder_flash_p2p_sweep.csv``: every
setting run with P2P on and off in one campaign, so the difference is what the host-staged path
costs). ``tools/fits/fit_p2p_off_transport.py`` prints each fit.

* ``fit_shm_grid``: two constants of the SHM transport, to the decode time P2P off adds over P2P on
  (standard schedule only: it hides nothing, so its extra is the transport's cost alone; the other
  schedules stay held out): ``shm.ll_bus_bandwidth_gb_per_s`` (what LL really moves through host
  memory) and ``nccl_graph.channels x pcie_link_gb_per_s`` (the bus bandwidth NCCL's tuner believes the
  SHM path has, which decides where it leaves the SHM ring for NVLS). A grid over both; the
  objective is the median absolute error of the predicted extra decode time over the pairs where P2P
  off adds >= 3% (``laddersim.validation.p2p_pairs``).
* ``paired_allreduce_points`` and ``fit_lines``: what one AllReduce takes with P2P off on the
  authors' machine (the P2P-on model's time plus what P2P off adds, from the decode and the prefill
  pairs of the schedules that hide nothing), and what NCCL runs there fitted to it: at 2 GPUs the
  SHM ring's Simple bandwidth (``shm.simple_bus_bandwidth_gb_per_s``, NCCL's own Simple latency kept),
  above 2 the NVSwitch's NVLS lines (``transport.nvls``, protocol lines as
  ``laddersim.fitting.curve_fits.fit_protocol_terms`` fits a measured curve; for 8 GPUs with the
  authors' 4 MiB microbenchmark).
* ``extra_per_allreduce`` fits nothing: per TP and AllReduce message size, the time P2P off adds to
  each AllReduce of the standard schedule, measured and predicted (where the transport's size curve
  is off).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.costs import transport
from laddersim.costs.allreduce import allreduce_time_s
from laddersim.costs.collectives import collective_choice
from laddersim.costs.nccl_tuning import BASE_LATENCY_US
from laddersim.fitting.curve_fits import fit_protocol_terms
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.model.shape import load_model_shape
from laddersim.support.resources import data_path
from laddersim.validation.core import ValidationSetup, validate
from laddersim.validation.p2p_pairs import p2p_off_pairs, pair_summary

PAIRED_TABLE = data_path("validation", "ladder_flash_p2p_sweep.csv")
# The tables whose standard rows ``extra_per_allreduce`` reads, with the framework each ran.
BY_SIZE_TABLES = {"ladder_70b_tp_sweep.csv": "gpt-fast", "ladder_flash_p2p_sweep.csv": "gpt-fast-flash"}
LL_GRID_GBPS = (2.75, 4.0, 5.0, 6.5, 9.1)  # the public tables' fitted range (public_tables.fit_shm_transport)
GRAPH_GRID = ((12.0, 1), (12.0, 2), (24.0, 2), (48.0, 2))  # (NCCL link GB/s, channels)
# The schedules that hide no collective, and their AllReduces a layer (desync_half: after the MLP only).
EXPOSED_ALLREDUCES = {"standard": 2, "desync_half": 1}
# The authors' AllReduce microbenchmark, as quoted for Zhang et al., arXiv 2501.06589 (its P2P-off
# point is hardware_profiles/tables/ladder_paper_p2p_off_point.csv): 8 GPUs, 4 MiB, 78.6 us with
# P2P on, 135.4 us with P2P off.
MICROBENCH = {"gpus": 8, "size_bytes": 4.0 * 2**20, "on_us": 78.6, "off_us": 135.4}


def with_constants(profile: HardwareProfile, ll_gbps: float, link_gbps: float, channels: int) -> HardwareProfile:
    """``profile`` with its SHM LL bandwidth and NCCL's PCIe link estimate and channels set."""
    spec = profile.collectives.transport
    shm = spec.shm.model_copy(update={"ll_bus_bandwidth_gb_per_s": spec.shm.ll_bus_bandwidth_gb_per_s.model_copy(
        update={"value": ll_gbps})})
    graph = spec.nccl_graph.model_copy(update={
        "pcie_link_gb_per_s": spec.nccl_graph.pcie_link_gb_per_s.model_copy(update={"value": link_gbps}),
        "channels": spec.nccl_graph.channels.model_copy(update={"value": float(channels)})})
    collectives = profile.collectives.model_copy(update={"transport": spec.model_copy(
        update={"shm": shm, "nccl_graph": graph})})
    return profile.model_copy(update={"collectives": collectives})


def fit_shm_grid(measured: pd.DataFrame, base: str = "h100-sxm-p2p-off") -> pd.DataFrame:
    """Per point of ``LL_GRID_GBPS`` x ``GRAPH_GRID``, the P2P-off pairs' errors (``pair_summary``)
    of the standard rows of ``measured`` (``read_measured``), best first by the median error of the
    extra decode time."""
    measured = measured[measured["schedule"] == "standard"].reset_index(drop=True)
    on = validate(measured[measured["p2p"] == "on"].reset_index(drop=True))
    profile = load_profile(base)
    rows = []
    for ll in LL_GRID_GBPS:
        for link, channels in GRAPH_GRID:
            setup = ValidationSetup(hardware_p2p_off=with_constants(profile, ll, link, channels))
            off = validate(measured[measured["p2p"] == "off"].reset_index(drop=True), setup)
            summary = pair_summary(p2p_off_pairs(pd.concat([on, off], ignore_index=True)))
            rows.append({"ll_gbps": ll, "nccl_link_gbps": link, "channels": channels, **summary})
    return pd.DataFrame(rows).sort_values("extra_decode_median_abs_err_pct")


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


def paired_allreduce_points(measured: pd.DataFrame, on_profile: HardwareProfile, dtype_bytes: int = 2) -> pd.DataFrame:
    """What one AllReduce takes with P2P off, read from paired runs (``read_measured`` rows with
    ``decode_s`` and ``prefill_s``, each setting with P2P on and off): the time P2P off adds to one
    AllReduce (``extra_us``) plus the P2P-on model's time for it (``on_profile``).

    * decode: standard's off-minus-on step time minus desync_half's, over the layers: the two
      schedules differ by one AllReduce a layer, so what a step pays once (the logits gather,
      sampling) cancels; the message is batch x hidden x dtype bytes;
    * prefill: each exposed schedule's off-minus-on prefill time over its AllReduces (2 or 1 a
      layer); the message is batch x prompt x hidden x dtype bytes.
    Columns ``tp, phase, size_bytes, extra_us, on_us, off_us``; settings missing a side are skipped."""
    keys = ["model", "tp", "batch", "prompt_len", "gen_len"]
    rows = measured[measured["schedule"].isin(list(EXPOSED_ALLREDUCES)) & (measured["tp"] > 1)]
    table = rows.set_index(keys + ["schedule", "p2p"])
    points = []

    def extra(key, schedule, column):
        try:
            return float(table.loc[key + (schedule, "off"), column] - table.loc[key + (schedule, "on"), column])
        except KeyError:
            return float("nan")

    for key in rows.groupby(keys).groups:
        shape = load_model_shape(key[0])
        step = {s: extra(key, s, "decode_s") / key[4] for s in EXPOSED_ALLREDUCES}
        decode = (step["standard"] - step["desync_half"]) / shape.n_layers
        points.append((key[1], "decode", key[2] * shape.dim * dtype_bytes, decode))
        for schedule, per_layer in EXPOSED_ALLREDUCES.items():
            points.append((key[1], "prefill", key[2] * key[3] * shape.dim * dtype_bytes,
                           extra(key, schedule, "prefill_s") / (per_layer * shape.n_layers)))
    out = pd.DataFrame(points, columns=["tp", "phase", "size_bytes", "extra_us"]).dropna()
    out["extra_us"] *= 1e6
    out["on_us"] = [float(allreduce_time_s(on_profile, tp, np.array([size]))[0]) * 1e6
                    for tp, size in zip(out["tp"], out["size_bytes"])]
    out["off_us"] = out["on_us"] + out["extra_us"]
    return out.sort_values(["tp", "size_bytes", "phase"], kind="stable").reset_index(drop=True)


def fit_lines(points: pd.DataFrame, on_profile: HardwareProfile, off_profile: HardwareProfile) -> dict:
    """Per TP, the median P2P-off time of each message size, kept where NCCL's tuner (by its own
    estimates, ``off_profile``) runs the SHM ring's Simple (2 GPUs) or NVLS (more); then the Simple
    busbw (median over sizes of moved bytes / (time - NCCL's Simple ring latency)) and, per GPU
    count above 2, the NVLS protocol lines (8 GPUs: with the authors' microbenchmark, P2P-on model
    plus its measured difference). Returns ``{"simple_bus_bandwidth_gb_per_s": x, "nvls": {gpus: [(latency_us,
    busbw_gbps), ...]}, "points": frame}``."""
    medians = points.groupby(["tp", "size_bytes"], as_index=False)["off_us"].median()
    bench = MICROBENCH
    bench_on = float(allreduce_time_s(on_profile, bench["gpus"], np.array([bench["size_bytes"]]))[0]) * 1e6
    medians = pd.concat([medians, pd.DataFrame([{"tp": bench["gpus"], "size_bytes": bench["size_bytes"],
                                                 "off_us": bench_on + bench["off_us"] - bench["on_us"]}])],
                        ignore_index=True).sort_values(["tp", "size_bytes"], kind="stable").reset_index(drop=True)
    medians["choice"] = ["/".join(collective_choice(off_profile, int(tp), size))
                         for tp, size in zip(medians["tp"], medians["size_bytes"])]
    shm = off_profile.collectives.transport.shm
    simple = medians[medians["choice"] == "ring/simple"]
    latency_us = BASE_LATENCY_US["ring"][2] + 2.0 * (simple["tp"] - 1) * shm.simple_hop_latency_us.value
    moved = 2.0 * (simple["tp"] - 1) / simple["tp"] * simple["size_bytes"]
    nvls = {}
    for tp, part in medians[medians["choice"] == "nvls/simple"].groupby("tp"):
        nvls[int(tp)] = fit_protocol_terms(int(tp), part["size_bytes"].to_numpy(), part["off_us"].to_numpy())
    return {"simple_bus_bandwidth_gb_per_s": float(np.median(moved / (simple["off_us"] - latency_us) * 1e-3)),
            "nvls": nvls, "points": medians}


def stated_nvls_misses(points: pd.DataFrame, off_profile: HardwareProfile) -> dict[int, float]:
    """Per GPU count of ``fit_lines``' NVLS points, the largest relative error (%) of the profile's
    stated NVLS lines on them."""
    out = {}
    for gpus, part in points[points["choice"] == "nvls/simple"].groupby("tp"):
        stated = transport.nvls_s(off_profile, int(gpus), part["size_bytes"].to_numpy()) * 1e6
        out[int(gpus)] = float(np.max(np.abs(stated / part["off_us"].to_numpy() - 1.0)) * 100)
    return out
