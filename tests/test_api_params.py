"""The API's parameter objects: a value out of range is the same one line from ``laddersim.simulate``
(and the other functions) as from the command line; simulate's what-if overrides give the sweep's
row at the same point; ``plan --price-per-gpu-hour`` prices what the price file does not."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import laddersim
from cli_run import run_cli
from laddersim.api.params import RunOptions, ScenarioParams
from laddersim.errors import UserInputError

S8 = dict(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, prompt_len=128, gen_len=8)
S8_FLAGS = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--prompt-len", "128",
            "--gen-len", "8"]
SERVE = dict(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, rate=2.0, requests=20, prompt_len=64,
             gen_len=8)
SERVE_FLAGS = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--rate", "2",
               "--requests", "20", "--prompt-len", "64", "--gen-len", "8", "--no-progress"]
PLAN = dict(model="llama-3.1-8b", profiles=["h100-sxm-nvswitch"], tps=[2], batches=[1], prompt_len=64, gen_len=4,
            workers=1, min_user_tokens_per_s=5.0)
PLAN_FLAGS = ["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--tp", "2", "--batch", "1",
              "--prompt-len", "64", "--gen-len", "4", "--workers", "1", "--min-user-tokens-per-s", "5", "--no-progress"]
RATE_PLAN = {**PLAN, "rate": 1.0, "ttft_slo_s": 1.0, "requests": 10}
RATE_FLAGS = [*PLAN_FLAGS, "--rate", "1", "--ttft-slo-s", "1", "--requests", "10"]


def _api(call, **kwargs) -> str:
    with pytest.raises(UserInputError) as info:
        call(**kwargs)
    return str(info.value)


# (what, the API call, its keywords, the command line, the line both give)
CASES = [
    ("jitter", laddersim.simulate, {**S8, "jitter": -1}, ["simulate", *S8_FLAGS, "--jitter", "-1"],
     "jitter: must be a number from 0 to 2, got -1"),
    ("jitter", laddersim.simulate, {**S8, "jitter": 3}, ["simulate", *S8_FLAGS, "--jitter", "3"],
     "jitter: must be a number from 0 to 2, got 3"),
    ("jitter nan", laddersim.simulate, {**S8, "jitter": float("nan")}, ["simulate", *S8_FLAGS, "--jitter", "nan"],
     "jitter: must be a number from 0 to 2, got nan"),
    ("seed", laddersim.simulate, {**S8, "seed": -1}, ["simulate", *S8_FLAGS, "--seed", "-1"],
     "seed: must be an integer from 0 to 4294967295, got -1"),
    ("seed", laddersim.simulate, {**S8, "seed": 2**32}, ["simulate", *S8_FLAGS, "--seed", str(2**32)],
     "seed: must be an integer from 0 to 4294967295, got 4294967296"),
    ("sample steps", laddersim.simulate, {**S8, "sample_steps": 0}, ["simulate", *S8_FLAGS, "--sample-steps", "0"],
     "sample-steps: must be a positive integer up to 2147483647, got 0"),
    ("prompt", laddersim.simulate, {**S8, "prompt_len": 0}, ["simulate", *S8_FLAGS, "--prompt-len", "0"],
     "prompt-len: must be a positive integer up to 67108864, got 0"),
    ("gen", laddersim.simulate, {**S8, "gen_len": "x"}, ["simulate", *S8_FLAGS, "--gen-len", "x"],
     "gen-len: must be a positive integer up to 67108864, got 'x'"),
    ("gen", laddersim.simulate, {**S8, "gen_len": 2**26 + 1}, ["simulate", *S8_FLAGS, "--gen-len", str(2**26 + 1)],
     "gen-len: must be a positive integer up to 67108864, got 67108865"),
    ("tp", laddersim.simulate, {**S8, "tp": 0}, ["simulate", *S8_FLAGS, "--tp", "0"],
     "tp: must be a positive integer up to 65536, got 0"),
    ("batch", laddersim.simulate, {**S8, "batch": 0}, ["simulate", *S8_FLAGS, "--batch", "0"],
     "batch: must be a positive integer up to 1048576, got 0"),
    ("pp", laddersim.simulate, {**S8, "pp": -2}, ["simulate", *S8_FLAGS, "--pp", "-2"],
     "pp: must be a positive integer up to 65536, got -2"),
    ("dtype", laddersim.simulate, {**S8, "dtype": "int8"}, ["simulate", *S8_FLAGS, "--dtype", "int8"],
     "dtype: must be one of bfloat16, float16, float32, got 'int8'"),
    ("dtype fp8", laddersim.simulate, {**S8, "dtype": "fp8"}, ["simulate", *S8_FLAGS, "--dtype", "fp8"],
     "dtype: fp8 is not an element type of the whole pass; allowed: bfloat16, float16, float32, with --quant fp8 "
     "(FP8 linear layers) and --kv-cache-dtype fp8 (FP8 KV cache)"),
    ("quant", laddersim.simulate, {**S8, "quant": "int3"}, ["simulate", *S8_FLAGS, "--quant", "int3"],
     "quant: must be one of none, fp8, fp8-block, nvfp4, int8-weight, int4-weight, got 'int3'"),
    ("kv-cache-dtype", laddersim.simulate, {**S8, "kv_cache_dtype": "int8"},
     ["simulate", *S8_FLAGS, "--kv-cache-dtype", "int8"], "kv-cache-dtype: must be one of auto, fp8, got 'int8'"),
    ("what-if", laddersim.simulate, {**S8, "intra_bandwidth_gbps": 0},
     ["simulate", *S8_FLAGS, "--intra-bandwidth-gbps", "0"], "intra-bandwidth-gbps: must be > 0 and <= 1e+07, got 0.0"),
    ("what-if pair", laddersim.simulate, {**S8, "intra_latency_scale": 2, "intra_latency_us": 5},
     ["simulate", *S8_FLAGS, "--intra-latency-scale", "2", "--intra-latency-us", "5"],
     "intra-latency-us: give intra-latency-scale or intra-latency-us, not both"),
    ("kernels tp", laddersim.kernels, {**S8, "tp": 0}, ["kernels", *S8_FLAGS, "--tp", "0"],
     "tp: must be a positive integer up to 65536, got 0"),
    ("kernels batch", laddersim.kernels, {**S8, "batch": -1}, ["kernels", *S8_FLAGS, "--batch", "-1"],
     "batch: must be a positive integer up to 1048576, got -1"),
    ("rate", laddersim.serving, {**SERVE, "rate": 0}, ["serving", *SERVE_FLAGS, "--rate", "0"],
     "rate: must be a number from 1e-06 to 1e+09, got 0"),
    ("requests", laddersim.serving, {**SERVE, "requests": 0}, ["serving", *SERVE_FLAGS, "--requests", "0"],
     "requests: must be a positive integer up to 1000000, got 0"),
    ("ttft slo", laddersim.serving, {**SERVE, "ttft_slo_s": -1}, ["serving", *SERVE_FLAGS, "--ttft-slo-s", "-1"],
     "ttft-slo-s: must be a number > 0 and <= 1e+06, got -1"),
    ("tpot slo", laddersim.serving, {**SERVE, "tpot_slo_s": float("inf")},
     ["serving", *SERVE_FLAGS, "--tpot-slo-s", "inf"], "tpot-slo-s: must be a number > 0 and <= 1e+06, got inf"),
    ("serving seed", laddersim.serving, {**SERVE, "seed": -5}, ["serving", *SERVE_FLAGS, "--seed", "-5"],
     "seed: must be an integer from 0 to 4294967295, got -5"),
    ("serving tp", laddersim.serving, {**SERVE, "tp": 0}, ["serving", *SERVE_FLAGS, "--tp", "0"],
     "tp: must be a positive integer up to 65536, got 0"),
    ("serving length", laddersim.serving, {**SERVE, "prompt_len": "uniform:3"},
     ["serving", *SERVE_FLAGS, "--prompt-len", "uniform:3"],
     "prompt-len: 'uniform:3' is not a length; allowed: N, uniform:LO:HI or exponential:MEAN (integers from 1 to "
     "67108864, LO <= HI; a finite MEAN from 1 to 4194304)"),
    ("gamma", laddersim.serving, {**SERVE, "gamma_shape": 1e-300}, ["serving", *SERVE_FLAGS, "--gamma-shape", "1e-300"],
     "gamma-shape: must be a number from 0.01 to 100, got 1e-300"),
    ("plan tp", laddersim.plan, {**PLAN, "tps": [2, 0]}, [*PLAN_FLAGS, "--tp", "2", "0"],
     "tp: must be positive integers up to 65536, got 0"),
    ("plan batch", laddersim.plan, {**PLAN, "batches": [0]}, [*PLAN_FLAGS, "--batch", "0"],
     "batch: must be positive integers up to 1048576, got 0"),
    ("plan prompt", laddersim.plan, {**PLAN, "prompt_len": -1}, [*PLAN_FLAGS, "--prompt-len", "-1"],
     "prompt-len: must be a positive integer up to 67108864, got -1"),
    ("plan target", laddersim.plan, {**PLAN, "min_user_tokens_per_s": 0}, [*PLAN_FLAGS, "--min-user-tokens-per-s", "0"],
     "min-user-tokens-per-s: must be a number > 0 and <= 1e+15, got 0"),
    ("plan workers", laddersim.plan, {**PLAN, "workers": 0}, [*PLAN_FLAGS, "--workers", "0"],
     "workers: must be a positive integer up to 2147483647, got 0"),
    ("plan rate", laddersim.plan, {**RATE_PLAN, "rate": -1}, [*RATE_FLAGS, "--rate", "-1"],
     "rate: must be a number from 1e-06 to 1e+09, got -1"),
    ("plan requests", laddersim.plan, {**RATE_PLAN, "requests": 0}, [*RATE_FLAGS, "--requests", "0"],
     "requests: must be a positive integer up to 1000000, got 0"),
    ("plan slo", laddersim.plan, {**RATE_PLAN, "ttft_slo_s": 0}, [*RATE_FLAGS, "--ttft-slo-s", "0"],
     "ttft-slo-s: must be a number > 0 and <= 1e+06, got 0"),
    ("plan price", laddersim.plan, {**PLAN, "price_per_gpu_hour": -2}, [*PLAN_FLAGS, "--price-per-gpu-hour", "-2"],
     "price-per-gpu-hour: must be a number > 0 and <= 1e+06, got -2"),
    ("break-even lo", laddersim.break_even,
     dict(model="llama-3.1-8b", tp=2, a="ladder@h100-sxm-p2p-off", b="standard@h100-sxm-nvswitch", lo=0),
     ["plan", "break-even", "--model", "llama-3.1-8b", "--tp", "2", "--a", "ladder@h100-sxm-p2p-off", "--b",
      "standard@h100-sxm-nvswitch", "--lo", "0"], "lo: must be a number > 0 and <= 1e+15, got 0"),
]


@pytest.mark.parametrize("what, call, kwargs, argv, line", CASES, ids=[c[0] for c in CASES])
def test_a_value_out_of_range_is_the_same_line_from_the_api_and_the_command(what, call, kwargs, argv, line, capsys):
    assert _api(call, **kwargs) == line
    code, out, err = run_cli(argv, capsys)
    assert (code, out, err) == (2, "", f"error: {line}\n")


def test_timeline_checks_as_simulate_does():
    assert _api(laddersim.timeline, **S8, jitter=-1) == "jitter: must be a number from 0 to 2, got -1"
    assert _api(laddersim.timeline, **{**S8, "batch": 0}) == "batch: must be a positive integer up to 1048576, got 0"


def test_the_objects_are_frozen_typed_and_refuse_unknown_fields():
    params = ScenarioParams.of(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2.0, batch=4)
    assert (params.tp, type(params.tp), params.batch) == (2, int, 4)
    with pytest.raises(Exception):
        params.tp = 4  # frozen
    with pytest.raises(UserInputError, match="^tpp: unknown parameter$"):
        ScenarioParams.of(model="m", hardware="h", tp=2, tpp=2)
    with pytest.raises(UserInputError, match="^tp: required$"):
        ScenarioParams.of(model="m", hardware="h")
    with pytest.raises(UserInputError, match=r"^tp: must be a positive integer up to 65536, got True$"):
        ScenarioParams.of(model="m", hardware="h", tp=True)  # a bool is no count
    with pytest.raises(UserInputError, match=r"^exact-steps: must be True or False, got 1$"):
        RunOptions.of(exact_steps=1)
    assert RunOptions.of(jitter=0.05, seed=7).sim_options().seed == 7


def test_the_flags_defaults_are_the_objects():
    from laddersim.api.plan_params import PlanParams
    from laddersim.api.serving_params import ServingParams
    from laddersim.cli import build_parser

    def defaults(command):
        sub = next(a for a in build_parser([command])._actions if a.dest == "command").choices[command]
        return {a.dest: a.default for a in sub._actions}

    for command, params in (("simulate", ScenarioParams), ("simulate", RunOptions), ("serving", ServingParams),
                            ("plan", PlanParams)):
        flags = defaults(command)
        shared = [name for name in params.model_fields if name in flags and not params.model_fields[name].is_required()]
        assert len(shared) >= 3, (command, params)
        for name in shared:
            want = params.model_fields[name].default
            assert flags[name] == want or str(flags[name]) == str(want), (command, name)


# ---- simulate's what-if overrides are the sweep's ----------------------------------------------------

WHAT_IFS = [
    dict(tp=2, intra_bandwidth_gbps=100.0, compute_slowdown=0.1),
    dict(tp=4, intra_latency_scale=2.0, comm_slowdown=0.2, gpus_per_node=2.0),
    dict(tp=16, inter_latency_us=20.0, nics_per_node=4.0, intra_bandwidth_scale=0.5),
]


@pytest.mark.parametrize("what_if", WHAT_IFS, ids=["intra-set", "repacked", "inter-set"])
def test_simulate_with_a_what_if_is_the_sweeps_row(what_if, tmp_path, capsys):
    from laddersim.sweeps.evaluate import METRIC_COLUMNS

    tp, overrides = what_if["tp"], {k: v for k, v in what_if.items() if k != "tp"}
    scenario = dict(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", prompt_len=64, gen_len=4)
    frame = laddersim.simulate(**scenario, tp=tp, **overrides)
    plain = laddersim.simulate(**scenario, tp=tp)
    grid = {"models": ["llama-3.1-8b"], "hardware": ["h100-sxm-nvswitch"], "tp": [tp], "prompt_len": [64],
            "gen_len": [4], "overrides": {k: [v] for k, v in overrides.items()}}
    table = laddersim.sweep(grid, tmp_path / "sweep", workers=1)
    assert set(table["status"]) == {"ok"}
    for schedule in ("standard", "ladder"):
        row = frame[frame["schedule"] == schedule].iloc[0]
        swept = table[table["schedule"] == schedule].iloc[0]
        assert all(swept[k] == v for k, v in overrides.items())
        for column in METRIC_COLUMNS:
            assert row[column] == swept[column], (schedule, column)
    assert frame["tokens_per_s"].tolist() != plain["tokens_per_s"].tolist()  # the what-if changed something
    flags = [f"--{k.replace('_', '-')}" if i % 2 == 0 else str(v)
             for k, v in overrides.items() for i in range(2)]
    code, out, _ = run_cli(["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", str(tp),
                            "--prompt-len", "64", "--gen-len", "4", *flags, "--json"], capsys)
    assert code == 0 and json.loads(out) == frame.to_dict("records")


# ---- plan --price-per-gpu-hour -----------------------------------------------------------------------

UNPRICED = "b200-sxm-nvswitch"  # a shipped profile the shipped price file has no price for


def test_a_named_profile_without_a_price_is_refused_with_what_to_do():
    from laddersim.planning.prices import load_prices

    assert UNPRICED not in load_prices().prices
    line = _api(laddersim.plan, **{**PLAN, "profiles": [UNPRICED]})
    assert line.startswith(f"prices: no price for profile '{UNPRICED}'; priced: ")
    assert line.endswith("add it to a --prices file or give --price-per-gpu-hour USD")


def test_price_per_gpu_hour_prices_the_profiles_the_file_does_not(capsys):
    kwargs = {**PLAN, "profiles": [UNPRICED, "h100-sxm-nvswitch"], "price_per_gpu_hour": 7.5}
    frame = laddersim.plan(**kwargs)
    err = capsys.readouterr().err
    assert f"plan: priced at $7.5 per GPU-hour (--price-per-gpu-hour): {UNPRICED}\n" in err
    unpriced, priced = frame[frame["hardware"] == UNPRICED], frame[frame["hardware"] == "h100-sxm-nvswitch"]
    assert len(unpriced) and len(priced)
    assert (unpriced["usd_per_hour"] == unpriced["gpus"] * 7.5).all()
    from laddersim.planning.prices import load_prices

    file_price = load_prices().prices["h100-sxm-nvswitch"].usd_per_gpu_hour
    assert (priced["usd_per_hour"] == priced["gpus"] * file_price).all()  # the file's price stands
    code, out, _ = run_cli([*PLAN_FLAGS[:4], UNPRICED, "h100-sxm-nvswitch", *PLAN_FLAGS[5:], "--price-per-gpu-hour",
                            "7.5", "--json"], capsys)
    assert code == 0 and json.loads(out) == frame.to_dict("records")


def test_price_per_gpu_hour_in_a_rate_plan(capsys):
    frame = laddersim.plan(**{**RATE_PLAN, "profiles": [UNPRICED], "price_per_gpu_hour": 3.0})
    assert len(frame) and (frame["usd_per_gpu_hour"] == 3.0).all()
    assert pd.Series(frame["usd_per_hour"] == frame["gpus"] * 3.0).all()
    assert f"(--price-per-gpu-hour): {UNPRICED}" in capsys.readouterr().err
