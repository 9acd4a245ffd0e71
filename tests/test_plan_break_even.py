"""Break-even fabric: the bisection agrees with a direct sweep over the same scales."""

from __future__ import annotations

import json

import numpy as np
import pytest

from laddersim.cli import main
from laddersim.errors import UserInputError
from laddersim.plan import Scenario, Side, break_even, parse_side
from laddersim.sweep import run_sweep
from laddersim.sweep.grid import parse_grid

H100 = "h100-sxm-nvswitch"
SCENARIO = Scenario("llama-3.1-8b", tp=8, batch=4, prompt_len=128, gen_len=16)
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
        break_even(Scenario("llama-3.1-8b", tp=3, batch=1), LADDER, STANDARD, "intra_bandwidth")
    assert main(["plan", "break-even", "--model", "llama-3.1-8b", "--tp", "8", "--a", "ladder@nope",
                 "--b", f"standard@{H100}"]) == 2
    assert capsys.readouterr().err.startswith("error: hardware: unknown profile 'nope'")
