"""Serving and planning reliability (issue #31, #32 item 5): a capacity search that never turns
"every rate passes" into "no rate", finite figures from degenerate arrivals, bounded serving
inputs checked before any work, YAML alias bombs refused at once, ``--trace-steps`` digits, blank
plot cells, and one workload default printed in every serving and plan answer."""

from __future__ import annotations

import json
import math
import time

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_run import run_cli
from laddersim.support.io_read import check_tree, read_yaml
from laddersim.errors import UserInputError
from laddersim.support.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN
from laddersim.model.shape import load_model_shape
from laddersim.planning.serving_plan import plan_for_rate
from laddersim.traffic.arrivals import LengthSpec, draw_requests
from laddersim.traffic.capacity import OfferedLoad, max_sustainable_rate, sustains
from laddersim.traffic.options import serving_options
from laddersim.traffic.run import serving_scenario

MODEL, HARDWARE, TP = "llama-3.1-8b", "h200-sxm-nvswitch", 2
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def _one_line_error(code, err, field):
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and field in err and "Traceback" not in err


def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-finite {name} in the JSON answer")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def scenarios():
    return {s: serving_scenario(MODEL, HARDWARE, TP, s) for s in ("standard", "ladder")}


# ---- 1. the capacity search ----------------------------------------------------------------

# Light: a few short requests (every rate passes: the old search said "no rate"); heavy: long
# prompts and tight SLOs (the offered rate often fails, the capacity is bisected).
light = st.tuples(st.just("light"), st.integers(3, 12), st.sampled_from([16, 64, 128]), st.integers(1, 16),
                  st.floats(4.0, 64.0), st.sampled_from([0.2, 0.5, 2.0]))
heavy = st.tuples(st.just("heavy"), st.integers(30, 60), st.sampled_from([1024, 2048]), st.integers(16, 64),
                  st.floats(2.0, 80.0), st.sampled_from([0.05, 0.1, 0.3]))


@settings(max_examples=16, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(workload=st.one_of(light, heavy), schedule=st.sampled_from(["standard", "ladder"]),
       chunked=st.booleans(), tpot=st.sampled_from([None, 0.02]))
def test_a_sustained_offered_rate_is_at_most_the_capacity_and_plan_lists_it(scenarios, workload, schedule, chunked,
                                                                           tpot):
    _, n, prompt, gen, rate, ttft = workload
    options = serving_options(ttft_slo_s=ttft, tpot_slo_s=tpot, chunked_prefill=chunked)
    load = OfferedLoad(n, LengthSpec("fixed", prompt), LengthSpec("fixed", gen))
    scenario = scenarios[schedule]
    ok, _ = sustains(scenario, options, load, rate)
    cap = max_sustainable_rate(scenario, options, load, start_rate=rate)
    if ok:
        assert cap.rate is not None and cap.rate >= rate, cap.describe()
    else:
        assert cap.rate is None or cap.rate < rate
    if cap.bracket:  # bisected: sustained below, not sustained above, within the tolerance
        lo, hi = cap.bracket
        assert lo == cap.rate and lo < hi <= lo * 1.02 * (1 + 1e-12) and not cap.at_least
    judged = {r: m["slo_attainment"] >= options.slo_attainment for r, m in cap.tried}
    if cap.rate is not None:  # the answer is a rate simulated and sustained; its bracket's top was not
        assert judged[cap.rate] and cap.summary["slo_attainment"] >= options.slo_attainment
    if cap.bracket:
        assert not judged[cap.bracket[1]]
    if cap.at_least:  # nothing failed, up to the saturation throughput (or the offered rate above it)
        assert all(judged.values()) and cap.rate == max(rate, min(judged))  or all(judged.values())
    # plan --rate on the same candidate: listed (with a capacity >= the rate) whenever the rate passes
    shape = load_model_shape(MODEL)
    plan = plan_for_rate(shape, [(HARDWARE, scenario.hardware, TP, schedule)], {HARDWARE: 1.0}, rate, options, load)
    planned = plan.options
    assert len(planned) + len(plan.skipped) == 1  # listed, or skipped with its reason: never lost
    assert all(s.reason == cap.describe() for s in plan.skipped)
    if ok:
        assert len(planned) == 1 and planned[0].capacity_req_per_s >= rate and planned[0].replicas == 1


def test_issue_examples_every_rate_passing_is_a_capacity_not_no_rate(capsys):
    args = ["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--rate", "16", "--requests", "10",
            "--prompt-len", "64", "--gen-len", "16", "--capacity", "--ttft-slo-s", "0.5", "--target-rate", "30",
            "--no-progress"]
    code, out, err = run_cli(args + ["--json"], capsys)
    assert code == 0, err
    for row in _strict_json(out):
        assert row["slo_attainment"] == 1.0
        assert row["capacity_req_per_s"] >= 16 and row["capacity_at_least"] and row["replicas"] == 1
        assert row["gpus"] == 2 and row["usd_per_hour"] > 0
    code, out, _ = run_cli(args, capsys)
    assert code == 0 and "no rate found" not in out and out.count("capacity at least") == 2
    code, out, err = run_cli(["serving", "--model", "llama-3.1-70b", "--hardware", "h100-sxm-nvswitch", "--tp", "8",
                              "--rate", "16", "--requests", "10", "--prompt-len", "64", "--gen-len", "uniform:1:64",
                              "--chunked-prefill", "--capacity", "--ttft-slo-s", "0.5", "--json", "--no-progress"],
                             capsys)
    assert code == 0, err
    assert all(r["capacity_req_per_s"] >= 16 for r in _strict_json(out))
    plan = ["plan", "--model", MODEL, "--profiles", HARDWARE, "--tp", "2", "--rate", "16", "--requests", "10",
            "--prompt-len", "64", "--gen-len", "16", "--ttft-slo-s", "0.5", "--no-progress"]
    code, out, err = run_cli(plan + ["--json"], capsys)
    assert code == 0, err
    rows = _strict_json(out)
    assert {r["schedule"] for r in rows} == {"standard", "ladder"}
    assert all(r["capacity_req_per_s"] >= 16 and r["capacity_at_least"] for r in rows)
    code, out, _ = run_cli(plan, capsys)
    assert code == 0 and ">= " in out and "no configuration" not in out


def test_no_rate_at_all_is_reported_as_such(scenarios):
    options = serving_options(ttft_slo_s=1e-5)  # below any prefill
    cap = max_sustainable_rate(scenarios["ladder"], options, OfferedLoad(5, LengthSpec("fixed", 64),
                                                                         LengthSpec("fixed", 4)), start_rate=2.0)
    assert cap.rate is None and "no rate found" in cap.describe()
    assert min(r for r, _ in cap.tried) == pytest.approx(1e-6)  # down to MIN_RATE, never below (no self-refusal)


# ---- 2. degenerate arrivals ----------------------------------------------------------------

def test_a_burst_trace_has_defined_finite_figures(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n3,100,8\n3,300,4\n3,50,2\n")
    code, out, err = run_cli(["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--trace", str(trace),
                              "--ttft-slo-s", "0.5", "--json", "--no-progress"], capsys)
    assert code == 0, err
    for row in _strict_json(out):  # no Infinity, no NaN
        assert row["offered_rate"] is None and row["keeps_up"] is None  # no rate offered, none kept up with
        assert row["throughput_req_per_s"] > 0 and row["slo_attainment"] == 1.0
        assert row["goodput_req_per_s"] == pytest.approx(row["throughput_req_per_s"])  # every request in SLO
    code, out, err = run_cli(["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--trace", str(trace),
                              "--ttft-slo-s", "1e-6", "--no-progress"], capsys)  # zero attainment: no NaN either
    assert code == 0 and "nan" not in out.lower() and "inf" not in out.lower()


@pytest.mark.parametrize("shape", ["1e-300", "0", "1e300", "nan"])
def test_degenerate_gamma_shapes_are_one_line_errors(capsys, shape):
    code, _, err = run_cli(["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--rate", "1",
                            "--gamma-shape", shape, "--no-progress"], capsys)
    _one_line_error(code, err, "gamma-shape")


def test_the_burstiest_allowed_shape_gives_finite_arrivals_or_one_line(recwarn):
    for seed in range(200):
        try:
            requests = draw_requests(2, 1.0, LengthSpec("fixed", 1), LengthSpec("fixed", 1), seed, 0.01)
        except UserInputError as exc:
            assert "gamma-shape" in str(exc)
            continue
        assert all(math.isfinite(a) for a in requests.arrival_s)
        assert requests.offered_rate is None or math.isfinite(requests.offered_rate)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# ---- 3. bounded inputs, checked before any work -------------------------------------------

@pytest.mark.parametrize("extra, field", [
    (["--seed", "-5"], "seed"),
    (["--seed", "4294967296"], "seed"),
    (["--prompt-len", "99999999999999999999"], "prompt-len"),
    (["--prompt-len", "exponential:inf"], "prompt-len"),
    (["--prompt-len", "exponential:nan"], "prompt-len"),
    (["--gen-len", "\u00b3"], "gen-len"),
    (["--requests", "2147483647"], "requests"),
    (["--rate", "1e-300"], "rate"),
    (["--rate", "1e300"], "rate"),
    (["--ttft-slo-s", "1e400"], "ttft-slo-s"),
    (["--max-running", "2147483647"], "max-running"),
    (["--block-size", "2147483647"], "block-size"),
])
def test_unbounded_serving_inputs_are_one_line_and_fast(capsys, extra, field):
    base = ["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--rate", "1", "--requests", "20",
            "--prompt-len", "64", "--no-progress"]
    started = time.monotonic()
    code, _, err = run_cli(base + extra, capsys)
    assert time.monotonic() - started < 20
    _one_line_error(code, err, field)


def test_a_request_beyond_the_context_and_a_run_too_long_are_refused(capsys):
    base = ["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--rate", "1", "--no-progress"]
    code, _, err = run_cli(base + ["--requests", "2", "--prompt-len", "100000", "--gen-len", "40000",
                                   "--chunked-prefill"], capsys)
    _one_line_error(code, err, "131072-token context")
    code, _, err = run_cli(base + ["--requests", "1000000", "--prompt-len", "8", "--gen-len", "1000",
                                   "--max-running", "64"], capsys)
    _one_line_error(code, err, "iterations")


@pytest.mark.parametrize("row, why", [
    ("1e400,10,5", "arrival_s"), ("inf,10,5", "arrival_s"), ("nan,10,5", "arrival_s"), ("1e10,10,5", "arrival_s"),
    ("0,99999999999999999999,5", "prompt_len"), ("0,\u00b3,5", "prompt_len"), ("0,10,0", "output_len"),
])
def test_trace_rows_are_bounded(capsys, tmp_path, row, why):
    trace = tmp_path / "t.csv"
    trace.write_text(f"arrival_s,prompt_len,output_len\n0,10,5\n{row}\n")
    code, _, err = run_cli(["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--trace", str(trace),
                            "--no-progress"], capsys)
    _one_line_error(code, err, "line 3")
    assert why in err


def test_a_binary_trace_is_one_line(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"arrival_s,prompt_len,output_len\n0,1\x00,1\n")
    code, _, err = run_cli(["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--trace", str(trace),
                            "--no-progress"], capsys)
    _one_line_error(code, err, "trace")


@pytest.mark.parametrize("setting, field", [
    ("ttft_slo_s: 1e400", "ttft_slo_s"), ("rate: ['inf']", "rate"), ("rate: [.nan]", "rate"),
    ("rate: ['1e-300']", "rate"), ("requests: 2147483647", "requests"), ("seed: -5", "seed"),
    ("tpot_slo_s: 'inf'", "tpot_slo_s"), ("max_running: [2147483647]", "max_running"),
])
def test_a_sweep_serving_section_is_bounded(capsys, tmp_path, setting, field):
    grid = tmp_path / "g.yaml"
    grid.write_text(f"models: [{MODEL}]\nhardware: [{HARDWARE}]\ntp: [2]\nprompt_len: [64]\ngen_len: [8]\n"
                    f"serving:\n  rate: [2]\n  requests: 10\n  {setting}\n")
    code, _, err = run_cli(["sweep", str(grid), "--out", str(tmp_path / "out"), "--workers", "1", "--no-progress"],
                           capsys)
    _one_line_error(code, err, field)
    assert not (tmp_path / "out" / "results.csv").exists()


@pytest.mark.parametrize("extra, field", [
    (["--requests", "2147483647"], "requests"), (["--rate", "1e300"], "rate"), (["--rate", "1e-300"], "rate"),
    (["--ttft-slo-s", "1e400"], "ttft-slo-s"), (["--prompt-len", "99999999999999999999"], "prompt-len"),
])
def test_plan_rate_inputs_are_bounded(capsys, extra, field):
    args = ["plan", "--model", MODEL, "--profiles", HARDWARE, "--tp", "2", "--rate", "4", "--ttft-slo-s", "0.5",
            "--no-progress"]
    for i, part in enumerate(extra[::2]):
        if part in args:
            args[args.index(part) + 1] = extra[2 * i + 1]
        else:
            args += [part, extra[2 * i + 1]]
    started = time.monotonic()
    code, _, err = run_cli(args, capsys)
    _one_line_error(code, err, field)
    assert time.monotonic() - started < 10


def test_a_price_written_as_inf_is_refused(capsys, tmp_path):
    prices = tmp_path / "p.yaml"
    prices.write_text(f"prices:\n  {HARDWARE}:\n    usd_per_gpu_hour: inf\n    source: test\n    date: 2025-01\n")
    code, _, err = run_cli(["plan", "--model", MODEL, "--profiles", HARDWARE, "--tp", "2", "--rate", "4",
                            "--ttft-slo-s", "0.5", "--prices", str(prices), "--no-progress"], capsys)
    _one_line_error(code, err, "usd_per_gpu_hour")


# ---- 4. YAML alias bombs ------------------------------------------------------------------

def test_alias_bomb_is_refused_in_well_under_a_second(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    started = time.monotonic()
    with pytest.raises(UserInputError, match="expands to more than"):
        read_yaml(path, "grid")
    assert time.monotonic() - started < 0.5
    shared = list(range(100))  # a shared (aliased) subtree counts at every place it occurs
    check_tree({"a": [shared] * 1000}, "ok")
    with pytest.raises(UserInputError, match="expands"):
        check_tree({"a": [[shared] * 1000] * 30}, "bomb")
    loop: list = []
    loop.append(loop)
    with pytest.raises(UserInputError, match="recursive alias"):
        check_tree(loop, "loop")


@pytest.mark.parametrize("reader", ["prices", "grid", "profile"])
def test_every_yaml_reader_refuses_the_alias_bomb_in_one_line(capsys, tmp_path, reader):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    args = {"prices": ["plan", "--model", MODEL, "--profiles", HARDWARE, "--tp", "2", "--rate", "4", "--ttft-slo-s",
                       "0.5", "--prices", str(path), "--no-progress"],
            "grid": ["sweep", str(path), "--out", str(tmp_path / "o"), "--no-progress"],
            "profile": ["simulate", "--model", MODEL, "--hardware", str(path), "--tp", "2"]}[reader]
    started = time.monotonic()
    code, _, err = run_cli(args, capsys)
    _one_line_error(code, err, "expands to more than")
    assert time.monotonic() - started < 2.0


# ---- 5. --trace-steps digits, blank plot cells ---------------------------------------------

@pytest.mark.parametrize("steps", ["\u00b3", "\u0663", "1e3", "-1", ""])
def test_trace_steps_take_ascii_digits_only(capsys, tmp_path, steps):
    code, _, err = run_cli(["simulate", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--gen-len", "4",
                            "--trace", str(tmp_path / "t.json"), "--trace-steps", steps], capsys)
    _one_line_error(code, err, "trace-steps")
    assert not (tmp_path / "t.json").exists()


def test_trace_steps_beyond_any_count_is_every_step(capsys, tmp_path):
    code, _, err = run_cli(["simulate", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--gen-len", "4",
                            "--trace", str(tmp_path / "t.json"), "--trace-steps", "9" * 5000], capsys)
    assert code == 0, err


def test_a_blank_plot_cell_is_empty_not_a_contradiction(capsys, tmp_path):
    rows = [{"model": "m", "hardware": "h", "tp": 2, "batch": 1, "prompt_len": 32, "gen_len": 4, "schedule": s,
             "status": "ok", "tokens_per_s": t, "decode_step_s": "", "speedup_vs_standard": t / 1000}
            for s, t in (("standard", 1000.0), ("ladder", 1100.0))]
    path = tmp_path / "r.parquet"
    pd.DataFrame(rows).to_parquet(path)
    code, _, err = run_cli(["plot", str(path), "--kind", "throughput", "--out", str(tmp_path / "fig" / "x")], capsys)
    assert code == 0, err
    rows[0]["decode_step_s"] = "x"
    pd.DataFrame(rows).to_parquet(path)
    code, _, err = run_cli(["plot", str(path), "--kind", "throughput", "--out", str(tmp_path / "fig" / "x")], capsys)
    _one_line_error(code, err, "decode_step_s = 'x'")


# ---- #32 item 5: one workload default, printed in every answer --------------------------------

def test_one_gen_len_default_printed_by_serving_and_plan(capsys):
    code, out, err = run_cli(["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--rate", "0.5",
                              "--requests", "3", "--schedule", "ladder", "--ttft-slo-s", "1", "--no-progress"], capsys)
    assert code == 0, err
    assert f"prompt-len {DEFAULT_PROMPT_LEN}, gen-len {DEFAULT_GEN_LEN} tokens" in out
    assert ">= 90% of requests meet TTFT <= 1 s" in out
    code, out, err = run_cli(["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", "2", "--rate", "0.5",
                              "--requests", "3", "--schedule", "ladder", "--json", "--no-progress"], capsys)
    (row,) = _strict_json(out)
    assert (row["prompt_len"], row["gen_len"]) == (str(DEFAULT_PROMPT_LEN), str(DEFAULT_GEN_LEN))
    plan = ["plan", "--model", MODEL, "--profiles", HARDWARE, "--tp", "2", "--no-progress"]
    code, out, err = run_cli(plan + ["--rate", "0.5", "--requests", "3", "--ttft-slo-s", "1", "--schedule", "ladder"],
                             capsys)
    assert code == 0, err
    assert f"prompt-len {DEFAULT_PROMPT_LEN}, gen-len {DEFAULT_GEN_LEN} tokens" in out
    assert "TTFT p99" in out and ">= 90% of requests meet TTFT <= 1 s" in out
    code, out, err = run_cli(plan + ["--rate", "0.5", "--requests", "3", "--ttft-slo-s", "1", "--schedule", "ladder",
                                     "--json"], capsys)
    assert all((r["prompt_len"], r["gen_len"], r["slo_attainment"]) == (DEFAULT_PROMPT_LEN, DEFAULT_GEN_LEN, 0.9)
               for r in _strict_json(out))
    code, out, err = run_cli(plan + ["--batch", "8", "--workers", "1", "--min-user-tokens-per-s", "1",
                                     "--schedule", "ladder"], capsys)
    assert code == 0, err
    assert f"prompt-len {DEFAULT_PROMPT_LEN}, gen-len {DEFAULT_GEN_LEN} tokens" in out
