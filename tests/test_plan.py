"""Capacity planning: hand-checked costs, the true cheapest option by brute force, prices, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from laddersim.cli import main
from laddersim.errors import DoesNotFitError, UserInputError
from laddersim.hardware import load_profile
from laddersim.model.shape import load_model_shape
from laddersim.planning import Target, candidate_tps, load_prices, rank_options
from laddersim.planning.planner import fewest_replicas
from laddersim.planning.prices import DEFAULT_PRICES
from laddersim.simulation.simulate import make_scenario, simulate


def _row(hardware, tp, batch, tpot_s, schedule="ladder", status="ok"):
    return {"hardware": hardware, "schedule": schedule, "tp": tp, "nodes": 1, "batch": batch,
            "status": status, "tpot_s": tpot_s, "memory_per_gpu_gib": 10.0}


# Worked by hand (prices: x 1 $/GPU-h, y 2 $/GPU-h; aggregate target 1000 tokens/s):
#   A x tp2 batch 4, 20 ms/token: 50 tok/s per user, 200 per replica -> 5 replicas, 10 GPUs, $10/h
#   B y tp1 batch 8, 25 ms/token: 40 tok/s per user, 320 per replica -> 4 replicas, 4 GPUs, $8/h
#   C x tp4 batch 1, 10 ms/token: 100 tok/s per user, 100 per replica -> 10 replicas, 40 GPUs, $40/h
ROWS = [_row("x", 2, 4, 0.020), _row("y", 1, 8, 0.025), _row("x", 4, 1, 0.010),
        _row("y", 8, 64, float("nan"), status="infeasible")]
PRICES = {"x": 1.0, "y": 2.0}


def test_hand_checked_ranking_by_cost_per_hour():
    options = rank_options(ROWS, PRICES, Target(min_total_tokens_per_s=1000))
    assert [(o.hardware, o.tp, o.replicas, o.gpus, o.usd_per_hour) for o in options] == [
        ("y", 1, 4, 4, 8.0), ("x", 2, 5, 10, 10.0), ("x", 4, 10, 40, 40.0)]
    b = options[0]
    assert b.total_tokens_per_s == pytest.approx(1280) and b.user_tokens_per_s == pytest.approx(40)
    assert b.usd_per_million_tokens == pytest.approx(8 / (1280 * 3600) * 1e6)  # 1.7361 $/Mtok


def test_per_user_and_latency_targets_filter():
    both = Target(min_user_tokens_per_s=45, min_total_tokens_per_s=1000)
    assert [(o.hardware, o.tp) for o in rank_options(ROWS, PRICES, both)] == [("x", 2), ("x", 4)]
    fast = Target(max_token_latency_ms=15)
    assert [(o.hardware, o.tp, o.replicas) for o in rank_options(ROWS, PRICES, fast)] == [("x", 4, 1)]


def test_without_an_aggregate_target_rank_by_cost_per_million_tokens():
    # One replica each: A $2/h at 200 tok/s = 2.78 $/Mtok; B $2/h at 320 = 1.74; C $4/h at 100 = 11.1.
    options = rank_options(ROWS, PRICES, Target(min_user_tokens_per_s=1))
    assert [o.hardware + str(o.tp) for o in options] == ["y1", "x2", "x4"]
    assert options[1].usd_per_million_tokens == pytest.approx(2 / (200 * 3600) * 1e6)
    by_hour = rank_options(ROWS, PRICES, Target(min_user_tokens_per_s=1), rank_by="usd_per_hour")
    assert [o.usd_per_hour for o in by_hour] == [2.0, 2.0, 4.0]


@pytest.mark.parametrize("target, replica, expected", [(600, 200, 3), (601, 200, 4), (0.3, 0.1, 3),
                                                       (1, 1 / 3, 3), (5, 1000, 1), (None, 7, 1)])
def test_fewest_replicas_is_exact(target, replica, expected):
    assert fewest_replicas(target, replica) == expected


def test_target_needs_something_positive():
    with pytest.raises(UserInputError, match="at least one"):
        Target()
    with pytest.raises(UserInputError, match="max_token_latency_ms must be > 0"):
        Target(max_token_latency_ms=0)


# ---- end to end on two made-up machines -------------------------------------------------------

def _variant(tmp_path: Path, name: str, hbm_scale: float, gpus_per_node: int | None = None) -> Path:
    """The H100 profile renamed, with scaled HBM bandwidth; optionally a smaller node and no
    network. Measured tables are shared with the original through a symlink."""
    h100 = load_profile("h100-sxm-nvswitch")
    raw = yaml.safe_load(Path(h100.base_dir, "h100-sxm-nvswitch.yaml").read_text())
    raw["name"] = name
    raw["gpu"]["memory_bandwidth_gb_per_s"]["value"] *= hbm_scale
    if gpus_per_node:
        raw["node"]["gpus_per_node"] = gpus_per_node
        raw.pop("network", None)
        fits = raw["collectives"].get("intra_node_fits")
        if fits:
            raw["collectives"]["intra_node_fits"] = [f for f in fits if f["gpus"] <= gpus_per_node]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    if not (tmp_path / "tables").exists():
        (tmp_path / "tables").symlink_to(Path(h100.base_dir, "tables"))
    return path


def _prices(tmp_path: Path, prices: dict[str, float]) -> Path:
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump({"prices": {
        name: {"usd_per_gpu_hour": usd, "source": "test", "date": "2025-01"} for name, usd in prices.items()}}))
    return path


WORK = ["--prompt-len", "128", "--gen-len", "16"]
BATCHES = [1, 8, 64]


def _brute_force(profiles: dict[str, Path], prices: dict[str, float], min_user: float, min_total: float):
    """Every (profile, TP, schedule, batch) simulated directly; the cost formulas written out."""
    model = load_model_shape("llama-3.1-8b")
    out = []
    for name, path in profiles.items():
        for tp in (1, 2, 4, 8, 16, 32):
            for schedule in ("standard", "ladder"):
                for batch in BATCHES:
                    try:
                        model.check_tp(tp)
                        result = simulate(make_scenario(model=model, hardware=str(path), tp=tp, batch=batch,
                                                        prompt_len=128, gen_len=16, schedule=schedule))
                    except (DoesNotFitError, UserInputError):
                        continue
                    s = result.summary()
                    if s["nodes"] > 4 or 1 / s["tpot_s"] < min_user:
                        continue
                    per_replica = batch / s["tpot_s"]
                    replicas = math.ceil(min_total / per_replica)
                    out.append((replicas * tp * prices[name], name, schedule, tp, batch, replicas))
    return sorted(out)


def test_plan_picks_the_truly_cheapest_option(tmp_path, capsys):
    prices = {"cheap-gpu": 1.0, "dear-gpu": 2.5}
    profiles = {"cheap-gpu": _variant(tmp_path, "cheap-gpu", 0.5, gpus_per_node=4),
                "dear-gpu": _variant(tmp_path, "dear-gpu", 1.5)}
    price_file = _prices(tmp_path, prices)
    expected = _brute_force(profiles, prices, min_user=60, min_total=3000)
    assert len({e[1] for e in expected}) == 2  # both machines have feasible options
    assert all(e[3] <= 4 for e in expected if e[1] == "cheap-gpu")  # no network: one 4-GPU node

    argv = ["plan", "--model", "llama-3.1-8b", "--profiles", *map(str, profiles.values()),
            "--prices", str(price_file), "--batch", *map(str, BATCHES), *WORK, "--min-user-tokens-per-s", "60",
            "--min-total-tokens-per-s", "3000", "--json", "--top", "1000", "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    options = json.loads(capsys.readouterr().out)
    assert len(options) == len(expected)
    best = options[0]
    cheapest = expected[0][0]
    winners = {(Path(profiles[e[1]]).as_posix(), e[2], e[3], e[4], e[5]) for e in expected if e[0] == cheapest}
    assert best["usd_per_hour"] == pytest.approx(cheapest)
    assert (best["hardware"], best["schedule"], best["tp"], best["batch"], best["replicas"]) in winners
    assert [o["usd_per_hour"] for o in options] == sorted(o["usd_per_hour"] for o in options)
    assert all(o["user_tokens_per_s"] >= 60 and o["total_tokens_per_s"] >= 3000 for o in options)


def test_plan_table_and_no_solution(tmp_path, capsys):
    path = _variant(tmp_path, "only-gpu", 1.0)
    prices = _prices(tmp_path, {"only-gpu": 2.0})
    base = ["plan", "--model", "llama-3.1-8b", "--profiles", str(path), "--prices", str(prices), "--tp", "1", "2",
            "--batch", "1", "8", *WORK, "--workers", "1", "--no-progress"]
    assert main(base + ["--min-user-tokens-per-s", "50", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "8 configurations simulated, 8 fit in memory" in out and "ranked by usd_per_million_tokens" in out
    assert "$/Mtok" in out and "user tok/s = 1 / time per output token" in out
    assert len([line for line in out.splitlines() if "only-gpu" in line]) == 3
    assert main(base + ["--max-token-latency-ms", "0.001"]) == 1
    assert "no configuration meets the target" in capsys.readouterr().out


def test_plan_errors(tmp_path, capsys):
    path = _variant(tmp_path, "unpriced-gpu", 1.0)
    assert main(["plan", "--model", "llama-3.1-8b", "--profiles", str(path), "--min-user-tokens-per-s", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: prices: no price for profile 'unpriced-gpu'; priced: ")
    assert main(["plan", "--model", "llama-3.1-8b"]) == 2
    assert "target: give at least one of" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("prices:\n  x: {usd_per_gpu_hour: -1, source: test, date: 2025-01}\n")
    assert main(["plan", "--model", "llama-3.1-8b", "--prices", str(bad), "--min-user-tokens-per-s", "1"]) == 2
    assert "prices.x.usd_per_gpu_hour" in capsys.readouterr().err
    # Bad inputs are one error line, not "no configuration meets the target" after a progress line.
    for extra, words in ((["--schedule", "foo"], "schedule: unknown 'foo'"), (["--tp", "3"], "tp: 3 does not divide"),
                         (["--model", "llama-3.1-99b"], "model: unknown preset")):
        args = ["plan", "--model", "llama-3.1-8b", "--min-user-tokens-per-s", "1", "--no-progress"] + extra
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err


def test_default_prices_cite_sources_and_cover_the_shipped_h100():
    prices = load_prices()
    assert DEFAULT_PRICES.exists() and "h100-sxm-nvswitch" in prices.prices
    for price in prices.prices.values():
        assert price.usd_per_gpu_hour > 0 and len(price.source) > 10 and price.date[:2] == "20"


def test_candidate_tps_respect_model_profile_and_nodes(tmp_path):
    model = load_model_shape("llama-3.1-70b")  # 64 heads, 8 KV heads
    h100 = load_profile("h100-sxm-nvswitch")
    assert candidate_tps(model, h100) == [1, 2, 4, 8, 16, 32, 64]
    assert candidate_tps(model, h100, max_nodes=2) == [1, 2, 4, 8, 16]
    assert candidate_tps(model, h100, allowed=[3, 8, 12]) == [8]
    small = load_profile(_variant(tmp_path, "four-gpu", 1.0, gpus_per_node=4))
    assert candidate_tps(model, small) == [1, 2, 4]


def test_plan_options_that_exclude_every_configuration_are_one_error_line(capsys):
    """TP 16 needs two 8-GPU nodes: with --max-nodes 1 nothing can be simulated, which is the
    user's own constraints conflicting, not "no configuration meets the target"."""
    argv = ["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--tp", "16", "--max-nodes", "1",
            "--min-user-tokens-per-s", "1", "--no-progress", "--workers", "1"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("error: tp: no configuration to simulate: --tp 16 with --max-nodes 1 "
                                   "(tp 16 spans at least 2 nodes)")
    assert "allowed --tp with --max-nodes 1 on the candidate profiles: 1, 2, 4, 8" in captured.err


def test_plan_refuses_fp8_as_a_dtype(capsys):
    # FP8 is a quantization of the linears (--quant fp8), not the element type of the whole pass.
    base = ["plan", "--model", "llama-3.1-8b", "--min-user-tokens-per-s", "1", "--no-progress", "--workers", "1",
            "--dtype", "fp8", "--gen-len", "8", "--batch", "1", "--tp", "1"]
    assert main(base + ["--profiles", "a100-sxm-nvswitch", "h100-sxm-nvswitch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dtype: fp8 is not an element type" in err and "--quant fp8" in err


def test_plan_names_the_allreduce_each_option_runs_as_simulate_does(capsys):
    from laddersim.api import allreduce_used

    argv = ["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "h100-sxm-p2p-off",
            "--tp", "1", "8", "--batch", "1", "16", "--schedule", "ladder", *WORK, "--min-user-tokens-per-s", "1",
            "--json", "--top", "100", "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    options = json.loads(capsys.readouterr().out)
    assert len(options) == 8
    for o in options:
        ran = allreduce_used(simulate(make_scenario(model="llama-3.1-8b", hardware=o["hardware"], tp=o["tp"],
                                                    batch=o["batch"], prompt_len=128, gen_len=16,
                                                    schedule="ladder")))
        assert o["allreduce"] == ran["decode"]
        assert (o["allreduce"] == "none") == (o["tp"] == 1)
    assert {o["allreduce"] for o in options if o["tp"] == 8} == {"nccl"}  # gpt-fast: dist.all_reduce
