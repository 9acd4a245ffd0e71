"""Break-even fabric: the bisection agrees with a direct sweep over the same scales."""

from __future__ import annotations

import json

from pathlib import Path

import numpy as np
import pytest
import yaml

from laddersim.cli import main
from laddersim.errors import UserInputError
from laddersim.hardware import load_profile
from laddersim.planning import SharedRun, Side, break_even, parse_side
from laddersim.sweeps import run_sweep
from laddersim.sweeps.grid import parse_grid

H100 = "h100-sxm-nvswitch"
SCENARIO = SharedRun("llama-3.1-8b", tp=8, batch=4, prompt_len=128, gen_len=16)
LADDER, STANDARD = Side("ladder", H100), Side("standard", H100)


def _sweep_scales(tmp_path, scale_key, scales, schedule):
    grid = parse_grid({"models": [SCENARIO.model], "hardware": [H100], "tp": [SCENARIO.tp],
                       "batch": [SCENARIO.batch], "prompt_len": [SCENARIO.prompt_len],
                       "gen_len": [SCENARIO.gen_len], "schedules": [schedule],
                       "overrides": {scale_key: scales} if scales else {}})
    frame = run_sweep(grid, tmp_path, progress=False).frame
    if not scales:
        return frame.tokens_per_s.iloc[0]
    return frame.sort_values(scale_key)[[scale_key, "tokens_per_s"]].to_numpy()


@pytest.mark.parametrize("vary, scale_key", [("intra_bandwidth", "intra_bandwidth_scale"),
                                             ("intra_latency", "intra_latency_scale")])
def test_break_even_lies_where_a_direct_sweep_changes_sign(tmp_path, vary, scale_key):
    """Ladder with a degraded fabric vs standard on the nominal one: the sweep of ladder's scale
    brackets the crossing between two neighbouring grid points; the bisection lands inside."""
    scales = [float(s) for s in np.geomspace(0.01, 100, 25)]
    result = break_even(SCENARIO, LADDER, STANDARD, vary, lo=scales[0], hi=scales[-1])
    target = _sweep_scales(tmp_path / "b", None, None, "standard")
    swept = _sweep_scales(tmp_path / "a", scale_key, scales, "ladder")
    assert result.b_tokens_per_s == target
    gap = swept[:, 1] - target
    flips = np.nonzero(np.sign(gap[1:]) != np.sign(gap[:-1]))[0]
    assert len(flips) == 1  # monotone: exactly one crossing in the grid
    lo, hi = swept[flips[0], 0], swept[flips[0] + 1, 0]
    assert lo < result.scale < hi
    assert result.bracket[1] / result.bracket[0] <= 1 + 1e-4
    # Past the crossing the ladder loses for less bandwidth / more latency.
    assert (gap[0] < 0) == (vary == "intra_bandwidth")
    # The value is the profile's nominal number times the scale.
    assert result.value == pytest.approx(result.nominal * result.scale)


def test_no_crossing_is_reported(tmp_path):
    # With at least the nominal bandwidth, ladder beats standard on the nominal fabric throughout.
    result = break_even(SCENARIO, LADDER, STANDARD, "intra_bandwidth", lo=1.0, hi=100.0)
    assert result.scale is None and result.value is None
    assert result.a_tokens_per_s_at_lo > result.b_tokens_per_s


def test_cli_break_even(capsys):
    argv = ["plan", "break-even", "--model", "llama-3.1-8b", "--tp", "8", "--batch", "4", "--prompt-len", "128",
            "--gen-len", "16", "--a", f"ladder@{H100}", "--b", f"standard@{H100}", "--vary", "intra_bandwidth"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"break-even: ladder@{H100} matches standard@{H100} at intra_bandwidth x" in out
    assert "GB/s (nominal" in out
    assert main(argv + ["--lo", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scale"] is None and data["value"] is None and data["lo"] == 1.0
    assert main(argv + ["--lo", "1"]) == 0
    assert "no crossing in [1, 100]" in capsys.readouterr().out


def test_break_even_input_errors(capsys):
    with pytest.raises(UserInputError, match="a: 'ladder' is not SCHEDULE@PROFILE"):
        parse_side("ladder", "a")
    with pytest.raises(UserInputError, match="vary: unknown 'bandwidth'; allowed: intra_bandwidth"):
        break_even(SCENARIO, LADDER, STANDARD, "bandwidth")
    with pytest.raises(UserInputError, match=r"^standard@h100-sxm-nvswitch: tp: 3"):
        break_even(SharedRun("llama-3.1-8b", tp=3, batch=1), LADDER, STANDARD, "intra_bandwidth")
    assert main(["plan", "break-even", "--model", "llama-3.1-8b", "--tp", "8", "--a", "ladder@nope",
                 "--b", f"standard@{H100}"]) == 2
    assert capsys.readouterr().err.startswith("error: hardware: unknown profile 'nope'")


@pytest.mark.parametrize("vary", ["inter_bandwidth", "inter_latency"])
def test_an_inter_node_scale_on_one_node_is_refused(vary, capsys):
    """TP 8 fits one 8-GPU node: no AllReduce crosses the network, so the scale changes nothing and
    a "no crossing" answer would be meaningless."""
    with pytest.raises(UserInputError, match=f"^vary: {vary} has no effect: TP 8 fits one {H100} node"):
        break_even(SCENARIO, LADDER, STANDARD, vary)
    argv = ["plan", "break-even", "--model", "llama-3.1-8b", "--tp", "8", "--batch", "4", "--prompt-len", "128",
            "--gen-len", "16", "--a", f"ladder@{H100}", "--b", f"standard@{H100}", "--vary", vary]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: vary: {vary} has no effect") and captured.err.count("\n") == 1
    assert "allowed here: intra_bandwidth, intra_latency" in captured.err


def test_tp_1_has_nothing_to_vary():
    with pytest.raises(UserInputError, match="^vary: intra_bandwidth has no effect: TP 1 runs no AllReduce"):
        break_even(SharedRun("llama-3.1-8b", tp=1, batch=1, prompt_len=128, gen_len=16), LADDER, STANDARD,
                   "intra_bandwidth")


def _fit_only_h100(tmp_path) -> Path:
    """The H100 profile told to use its per-GPU-count fits rather than its measured table."""
    h100 = load_profile(H100)
    raw = yaml.safe_load(Path(h100.base_dir, f"{H100}.yaml").read_text())
    raw["name"] = "h100-fit-only"
    raw["collectives"]["prefer"] = "fit"
    path = tmp_path / "h100-fit-only.yaml"
    path.write_text(yaml.safe_dump(raw))
    (tmp_path / "tables").symlink_to(Path(h100.base_dir, "tables"))
    return path


def test_nominal_is_what_the_model_uses_for_the_group(tmp_path):
    """Not the profile's fallback alpha-beta numbers (collectives.intra_node: 370 GB/s, 8 us base)
    but the 8-GPU AllReduce as modelled: the fit's best term and smallest latency, or the
    measured table's large-message bus bandwidth and latency floor."""
    from laddersim.costs.scaling.nominal import group_nominal

    fit_profile = load_profile(_fit_only_h100(tmp_path))
    fit = fit_profile.intra_node_fit(8)
    assert fit is not None
    bandwidth, what = group_nominal(fit_profile, 8, "intra_bandwidth")
    assert bandwidth == pytest.approx(max(t.bus_bandwidth_gb_per_s for t in fit.terms), rel=1e-9)
    assert "8-GPU" in what and "fit for 8 GPUs" in what
    latency, what = group_nominal(fit_profile, 8, "intra_latency")
    assert latency == pytest.approx(min(t.latency_us for t in fit.terms), rel=1e-9)

    table_profile = load_profile(H100)
    fallback = table_profile.collectives.intra_node
    frame = next(f for t, f in table_profile.allreduce_tables if t.use == "model")
    rows = frame[(frame.gpus == 8) & (frame.nodes == 1)].sort_values("size_bytes")
    bandwidth, what = group_nominal(table_profile, 8, "intra_bandwidth")
    # nccl-tests bus bandwidth of the largest measured size: 2 (n-1)/n * size / time.
    last = rows.iloc[-1]
    assert bandwidth == pytest.approx(2 * 7 / 8 * last.size_bytes / last.time_s / 1e9, rel=1e-9)
    assert "measured table" in what
    assert bandwidth != pytest.approx(fallback.bus_bandwidth_gb_per_s.value, rel=0.01)
    latency, _ = group_nominal(table_profile, 8, "intra_latency")
    assert latency == pytest.approx(rows.time_s.iloc[0] * 1e6, rel=1e-9)
    assert latency != pytest.approx(fallback.base_latency_us.value, rel=0.01)

    result = break_even(SCENARIO, LADDER, STANDARD, "intra_bandwidth")
    assert result.nominal == bandwidth and "8-GPU AllReduce" in result.nominal_is


def test_the_nominal_is_labelled_by_the_path_the_model_uses():
    """Issue 38: under NCCL_P2P_DISABLE=1 (h100-sxm-p2p-off) the 8-GPU AllReduce's large messages
    run on the switch's NVLS line (452 GB/s), its small ones on an SHM ring: the label names those
    profile fields, not collectives.intra_node (109.9 GB/s, which no 8-GPU message uses)."""
    from laddersim.costs.scaling.nominal import group_nominal
    from laddersim.costs.transport import nvls_bus_bandwidth_gb_per_s

    profile = load_profile("h100-sxm-p2p-off")
    bandwidth, label = group_nominal(profile, 8, "intra_bandwidth")
    assert bandwidth == pytest.approx(nvls_bus_bandwidth_gb_per_s(profile, 8), rel=1e-6)
    assert "NVLS" in label and "collectives.transport.nvls" in label and "collectives.intra_node" not in label
    assert profile.collectives.intra_node.bus_bandwidth_gb_per_s.value == 109.9 != pytest.approx(bandwidth)
    _, label = group_nominal(profile, 8, "intra_latency")
    assert "SHM ring" in label and "collectives.transport.shm" in label
    # 2 GPUs: no NVLS (NCCL turns it off for 2), the SHM ring's Simple protocol carries large messages.
    _, label = group_nominal(profile, 2, "intra_bandwidth")
    assert "SHM ring" in label and "SIMPLE" in label
    # A profile without a transport keeps its measured table's label.
    assert group_nominal(load_profile(H100), 8, "intra_bandwidth")[1].endswith("(measured table)")
