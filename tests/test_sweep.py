"""Sweep: grid validation, point expansion, overrides, the results table, the store, the CLI."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from laddersim.costs.scaling.nominal import group_nominal
import yaml

from laddersim.cli import main
from laddersim.errors import UserInputError
from laddersim.hardware import load_profile
from laddersim.hardware.overrides import with_overrides
from laddersim.simulation.simulate import make_scenario, simulate
from laddersim.sweeps import INPUT_COLUMNS, expand_grid, load_grid, run_sweep
from laddersim.sweeps.evaluate import METRIC_COLUMNS
from laddersim.sweeps.grid import OVERRIDE_COLUMNS, parse_grid
from laddersim.sweeps.overrides import override_scales
from laddersim.sweeps.store import SweepStore

H100 = "h100-sxm-nvswitch"
# Short generations keep each point at a few milliseconds.
SMALL = {"models": ["llama-3.1-8b"], "hardware": [H100], "tp": [1, 2, 8], "batch": [1, 4],
         "prompt_len": [128], "gen_len": [16], "schedules": ["standard", "ladder"],
         "overrides": {"intra_bandwidth_scale": [0.5, 1.0]}}


def small_grid(**changes):
    return parse_grid({**SMALL, **changes})


def test_small_sweep_has_full_cross_product_and_columns(tmp_path):
    report = run_sweep(small_grid(), tmp_path, workers=1, progress=False)
    frame = pd.read_parquet(tmp_path / "results.parquet")
    summary = simulate(make_scenario(model="llama-3.1-8b", hardware=H100, tp=2, batch=1, prompt_len=128, gen_len=16,
                                     schedule="ladder")).summary()
    # Summary keys beyond the known metrics (added by later versions) follow them, sorted.
    extra = sorted(set(summary) - set(INPUT_COLUMNS) - set(METRIC_COLUMNS))
    assert list(frame.columns) == (list(INPUT_COLUMNS) + ["status", "error"] + list(METRIC_COLUMNS)
                                   + extra + ["speedup_vs_standard"])
    expected = set(itertools.product([1, 2, 8], [1, 4], ["standard", "ladder"], [0.5, 1.0]))
    got = list(zip(frame.tp, frame.batch, frame.schedule, frame.intra_bandwidth_scale))
    assert len(got) == len(expected) == 24 and set(got) == expected
    assert (frame.model == "llama-3.1-8b").all() and (frame.prompt_len == 128).all()
    assert (frame.status == "ok").all() and frame.error.isna().all()
    # Override columns not swept are empty, not zero.
    assert frame[[c for c in OVERRIDE_COLUMNS if c != "intra_bandwidth_scale"]].isna().all().all()
    # The CSV holds the same table, floats exactly.
    csv = pd.read_csv(tmp_path / "results.csv")
    pd.testing.assert_series_equal(csv.tokens_per_s, frame.tokens_per_s, check_exact=True)
    assert report.computed == 24 and report.reused == 0


def test_each_row_is_the_direct_simulation(tmp_path):
    frame = run_sweep(small_grid(tp=[2], batch=[4]), tmp_path, progress=False).frame
    profile = with_overrides(load_profile(H100), intra_bandwidth_scale=0.5)
    direct = simulate(make_scenario(model="llama-3.1-8b", hardware=profile, tp=2, batch=4, prompt_len=128, gen_len=16,
                                    schedule="ladder")).summary()
    row = frame[(frame.schedule == "ladder") & (frame.intra_bandwidth_scale == 0.5)].iloc[0]
    for metric in METRIC_COLUMNS:
        assert row[metric] == direct[metric], metric


def test_speedup_vs_standard_is_ratio_to_same_point(tmp_path):
    frame = run_sweep(small_grid(), tmp_path, progress=False).frame
    keys = ["tp", "batch", "intra_bandwidth_scale"]
    std = frame[frame.schedule == "standard"].set_index(keys).tokens_per_s
    for _, row in frame.iterrows():
        expected = row.tokens_per_s / std[tuple(row[k] for k in keys)]
        assert row.speedup_vs_standard == expected
    assert (frame[frame.schedule == "standard"].speedup_vs_standard == 1.0).all()
    # Ladder wins at TP>1 and ties at TP=1 (nothing to hide).
    ladder = frame[frame.schedule == "ladder"]
    assert (ladder[ladder.tp > 1].speedup_vs_standard > 1.0).all()
    # (to rounding: the two schedules sum the same op times in another order)
    assert (ladder[ladder.tp == 1].speedup_vs_standard <= 1.0 + 1e-12).all()


def test_no_standard_point_means_no_speedup(tmp_path):
    frame = run_sweep(small_grid(schedules=["ladder"], tp=[2]), tmp_path, progress=False).frame
    assert frame.speedup_vs_standard.isna().all()


def test_infeasible_points_are_recorded_not_dropped(tmp_path):
    grid = parse_grid({"models": ["llama-3.1-70b"], "hardware": [H100], "tp": [1, 3, 8],
                       "prompt_len": [128], "gen_len": [8], "schedules": ["standard", "hybrid:100"]})
    frame = run_sweep(grid, tmp_path, progress=False).frame
    assert len(frame) == 6
    by = {(r.tp, r.schedule): r for r in frame.itertuples()}
    assert by[(1, "standard")].status == "infeasible" and by[(1, "standard")].error.startswith("memory:")
    assert by[(3, "standard")].status == "infeasible" and by[(3, "standard")].error.startswith("tp: 3")
    assert by[(8, "hybrid:100")].status == "infeasible" and "hybrid" in by[(8, "hybrid:100")].error
    assert by[(8, "standard")].status == "ok" and by[(8, "standard")].nodes == 1
    infeasible = frame[frame.status == "infeasible"]
    assert infeasible[list(METRIC_COLUMNS)].isna().all().all()


def test_set_overrides_equal_the_matching_scales(tmp_path, h100):
    """Each set value is the number the model uses for the point's group (group_nominal) times
    the scale it must equal: half the bandwidth, twice the latency, intra- and inter-node (TP 16
    spans two nodes of 8)."""
    nominal = {q: group_nominal(h100, 16, q)[0] for q in ("intra_bandwidth", "intra_latency", "inter_bandwidth",
                                                           "inter_latency")}
    base = {"models": ["llama-3.1-8b"], "hardware": [H100], "tp": [16], "prompt_len": [128],
            "gen_len": [8], "schedules": ["standard"]}
    as_set = {"intra_bandwidth_gbps": [nominal["intra_bandwidth"] / 2],
              "intra_latency_us": [nominal["intra_latency"] * 2],
              "inter_bandwidth_gbps": [nominal["inter_bandwidth"] / 2],
              "inter_latency_us": [nominal["inter_latency"] * 2]}
    as_scale = {"intra_bandwidth_scale": [0.5], "intra_latency_scale": [2], "inter_bandwidth_scale": [0.5],
                "inter_latency_scale": [2]}
    a = run_sweep(parse_grid({**base, "overrides": as_set}), tmp_path / "a", progress=False).frame
    b = run_sweep(parse_grid({**base, "overrides": as_scale}), tmp_path / "b", progress=False).frame
    plain = run_sweep(parse_grid(base), tmp_path / "c", progress=False).frame
    assert a.nodes[0] == 2 and a.tokens_per_s[0] == pytest.approx(b.tokens_per_s[0], rel=1e-12)
    assert a.tokens_per_s[0] < plain.tokens_per_s[0]
    assert a.intra_bandwidth_gbps[0] == nominal["intra_bandwidth"] / 2
    assert math.isnan(a.intra_bandwidth_scale[0])


def test_a_set_bandwidth_is_the_bus_bandwidth_the_model_then_uses(h100):
    # 8 H100s use the measured table (about 450 GB/s at large messages), not the 370 GB/s
    # alpha-beta fallback: setting 900 GB/s must give a 900 GB/s AllReduce, whichever it is.
    for tp in (2, 4, 8):
        fast = with_overrides(h100, **override_scales(h100, {"intra_bandwidth_gbps": 900.0}, tp))
        assert group_nominal(fast, tp, "intra_bandwidth")[0] == pytest.approx(900.0, rel=1e-6)
    slow = with_overrides(h100, **override_scales(h100, {"intra_latency_us": 40.0}, 8))
    assert group_nominal(slow, 8, "intra_latency")[0] == pytest.approx(40.0, rel=1e-6)


def test_set_override_accounts_for_a_what_if_already_in_the_profile():
    base = load_profile(H100)
    profile = with_overrides(base, intra_bandwidth_scale=2.0)
    value = group_nominal(base, 8, "intra_bandwidth")[0]
    assert override_scales(profile, {"intra_bandwidth_gbps": value, "nics_per_node": None}, 8) == {
        "intra_bandwidth_scale": pytest.approx(0.5)}


def test_more_bandwidth_is_never_slower(tmp_path):
    grid = small_grid(tp=[8], batch=[16], overrides={"intra_bandwidth_scale": [0.1, 0.3, 1, 3, 10]})
    frame = run_sweep(grid, tmp_path, progress=False).frame
    for _, group in frame.groupby("schedule"):
        tokens = group.sort_values("intra_bandwidth_scale").tokens_per_s.to_numpy()
        assert (tokens[1:] >= tokens[:-1]).all() and tokens[-1] > tokens[0]


def test_repeated_values_add_no_duplicate_points():
    assert len(expand_grid(small_grid(tp=[2, 2], batch=[1, 1, 1]))) == 2 * 2


def test_two_local_workers_give_byte_identical_files(tmp_path):
    run_sweep(small_grid(), tmp_path / "one", workers=1, progress=False)
    run_sweep(small_grid(), tmp_path / "two", workers=2, progress=False)
    for name in ("results.csv", "results.parquet"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_rerun_computes_nothing_and_a_bigger_grid_only_the_new_points(tmp_path):
    run_sweep(small_grid(), tmp_path, progress=False)
    again = run_sweep(small_grid(), tmp_path, progress=False)
    assert (again.computed, again.reused) == (0, 24)
    bigger = run_sweep(small_grid(batch=[1, 4, 16]), tmp_path, progress=False)
    assert (bigger.computed, bigger.reused, len(bigger.frame)) == (12, 24, 36)
    lines = (tmp_path / "points.jsonl").read_text().splitlines()
    assert len(lines) == len({json.loads(line)["key"] for line in lines}) == 36


def test_store_drops_a_line_torn_by_a_kill(tmp_path):
    with SweepStore(tmp_path) as store:
        store.add({"key": "a", "x": 0.1})
        store.add({"key": "b", "x": 1 / 3})
    path = tmp_path / "points.jsonl"
    path.write_bytes(path.read_bytes() + b'{"key":"c","x":0.')  # killed mid-write
    with SweepStore(tmp_path) as store:
        assert set(store.rows) == {"a", "b"} and store.rows["b"]["x"] == 1 / 3
        store.add({"key": "c", "x": 2.0})
    assert [json.loads(x)["key"] for x in path.read_text().splitlines()] == ["a", "b", "c"]


def test_corrupt_store_line_is_a_user_error(tmp_path):
    (tmp_path / "points.jsonl").write_text('{"key":"a"}\nnot json\n')
    with pytest.raises(UserInputError, match="line 2"):
        SweepStore(tmp_path)


@pytest.mark.parametrize("raw, message", [
    ({**SMALL, "overrides": {"intra_bandwith_scale": [1]}}, "overrides.intra_bandwith_scale: unknown field"),
    ({**SMALL, "overrides": {"intra_bandwidth_scale": [1], "intra_bandwidth_gbps": [100]}}, "not both"),
    ({**SMALL, "overrides": {"intra_bandwidth_gbps": [0]}}, "intra_bandwidth_gbps"),
    ({**SMALL, "schedules": ["ladder", "laddr"]}, "schedules: unknown schedule 'laddr'; allowed: standard"),
    ({**SMALL, "tp": [0]}, "tp: .*positive"),
    ({**SMALL, "dtype": ["int4"]}, "dtype.0"),
    ({**SMALL, "modles": ["x"]}, "modles: unknown field"),
    # A field with a default is suggested too (only missing ones were), and the allowed names listed.
    ({**{k: v for k, v in SMALL.items() if k != "schedules"}, "schedule": ["ladder"]},
     r"schedule: unknown field \(did you mean 'schedules'\?\); allowed: models, hardware, tp"),
    ({**SMALL, "overrides": {"intra_bandwith_scale": [1]}}, r"did you mean 'intra_bandwidth_scale'\?\); allowed: "),
])
def test_bad_grid_names_the_field(raw, message):
    with pytest.raises(UserInputError, match=message):
        parse_grid(raw)


def test_unknown_model_or_profile_fails_before_running():
    with pytest.raises(UserInputError, match="hardware: unknown profile 'h100-nope'"):
        expand_grid(small_grid(hardware=["h100-nope"]))
    with pytest.raises(UserInputError, match="model: unknown preset"):
        expand_grid(small_grid(models=["llama-9"]))


def test_grid_file_with_relative_profile_path(tmp_path, h100):
    # A variant profile written beside the grid, named by a path relative to the grid file: the
    # H100 with half the HBM bandwidth (its measured tables shared through a symlink).
    raw = yaml.safe_load(Path(h100.base_dir, "h100-sxm-nvswitch.yaml").read_text())
    raw["name"] = "slow-h100"
    raw["gpu"]["memory_bandwidth_gb_per_s"]["value"] /= 2
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "slow.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "profiles" / "tables").symlink_to(Path(h100.base_dir, "tables"))
    grid = {**SMALL, "hardware": [H100, "profiles/slow.yaml"], "tp": [8], "batch": [1], "overrides": {}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    frame = run_sweep(load_grid(tmp_path / "grid.yaml"), tmp_path / "out", progress=False).frame
    assert set(frame.hardware) == {H100, "profiles/slow.yaml"} and (frame.status == "ok").all()
    tokens = frame.set_index(["hardware", "schedule"]).tokens_per_s
    assert tokens[("profiles/slow.yaml", "standard")] < tokens[(H100, "standard")]


def test_cli_flags_sweep_and_resume(tmp_path, capsys):
    argv = ["sweep", "--model", "llama-3.1-8b", "--hardware", H100, "--tp", "2", "4", "--batch", "1",
            "--prompt-len", "64", "--gen-len", "8", "--schedule", "standard", "ladder",
            "--inter-bandwidth-gbps", "25", "50", "--out", str(tmp_path), "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    assert "8 points (8 computed, 0 reused): ok 8" in capsys.readouterr().out
    assert main(argv) == 0
    assert "8 points (0 computed, 8 reused)" in capsys.readouterr().out
    frame = pd.read_csv(tmp_path / "results.csv")
    assert sorted(frame.inter_bandwidth_gbps.unique()) == [25.0, 50.0]
    assert load_grid(tmp_path / "grid.yaml").overrides.inter_bandwidth_gbps == [25.0, 50.0]


def test_cli_grid_file_and_errors(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({**SMALL, "tp": [2], "batch": [1]}))
    assert main(["sweep", str(grid), "--out", str(tmp_path / "o"), "--workers", "1", "--no-progress"]) == 0
    assert "4 points" in capsys.readouterr().out
    assert main(["sweep", str(grid), "--tp", "2", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == "error: sweep: give a GRID.yaml or grid flags, not both (flags given: tp)"
    assert main(["sweep", "--model", "llama-3.1-8b", "--out", str(tmp_path / "o")]) == 2
    assert "without a GRID.yaml, give --hardware, --tp" in capsys.readouterr().err
    grid.write_text("models: [llama-3.1-8b]\nhardware: [h100-sxm-nvswitch]\ntp: [2]\nschedules: [ladr]\n")
    assert main(["sweep", str(grid), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: grid g.yaml: schedules: ") and err.count("\n") == 1


def test_example_grids_parse():
    examples = sorted((Path(__file__).resolve().parents[1] / "examples").glob("sweep_*.yaml"))
    assert any(p.name == "sweep_bandwidth.yaml" for p in examples)
    for path in examples:
        grid = load_grid(path)
        assert grid.models and grid.hardware
