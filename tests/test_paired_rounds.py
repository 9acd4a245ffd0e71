"""The benchmark's paired-round speedup estimator (calibration/paired_rounds.py) and its use by validate."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibration.paired_rounds import generations_per_measurement, paired_speedup, round_order
from laddersim.validation import ValidationSetup, validate


@settings(max_examples=60, deadline=None)
@given(speedup=st.floats(1.0, 4.0), noise=st.floats(0.0, 0.05),
       drift=st.lists(st.floats(0.5, 5.0), min_size=3, max_size=25), seed=st.integers(0, 2 ** 16))
def test_median_of_per_round_ratios_recovers_a_known_speedup_under_drift(speedup, noise, drift, seed):
    # Each round runs at its own machine speed (drift up to 10x between rounds, common to the
    # schedules of a round) plus independent noise of at most +-noise per measurement: the
    # estimate is the true speedup within what the noise alone allows, whatever the drift.
    rng = np.random.default_rng(seed)
    d = np.asarray(drift)
    base = d * (1.0 + rng.uniform(-noise, noise, d.size))
    other = d / speedup * (1.0 + rng.uniform(-noise, noise, d.size))
    median, q1, q3 = paired_speedup(base, other)
    lo, hi = speedup * (1 - noise) / (1 + noise), speedup * (1 + noise) / (1 - noise)
    assert lo - 1e-9 <= q1 <= median <= q3 <= hi + 1e-9


def test_paired_speedup_quartiles_and_bad_input():
    assert paired_speedup([2.0, 2.0, 2.0, 2.0], [1.0, 2.0, 1.0, 0.5]) == (2.0, 1.75, 2.5)
    with pytest.raises(ValueError, match="as many rounds"):
        paired_speedup([1.0, 2.0], [1.0])


def test_generations_per_measurement_reaches_the_least_duration():
    assert generations_per_measurement(0.3, 1.0) == 4  # 4 x 0.3 s >= 1 s, 3 x 0.3 s < 1 s
    assert generations_per_measurement(2.0, 1.0) == 1
    assert generations_per_measurement(0.3, 0.0) == 1  # no least duration: one generation
    assert generations_per_measurement(0.0, 1.0) == 1  # no warm-up timed


def test_round_order_rotates_every_schedule_through_every_position():
    schedules = ("standard", "parallel", "ladder", "upper_bound")
    orders = [round_order(schedules, r) for r in range(4)]
    assert orders[0] == schedules and orders[1] == ("parallel", "ladder", "upper_bound", "standard")
    assert round_order(schedules, 4) == schedules
    for position in range(4):
        assert sorted(o[position] for o in orders) == sorted(schedules)


def test_validate_takes_a_measured_paired_speedup_where_the_rows_give_one(tmp_path, h100):
    cfg = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4,
           "intermediate_size": 4096, "vocab_size": 32000, "_name_or_path": "tiny"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rows = [dict(model=str(tmp_path / "config.json"), tp=2, nodes=1, batch=1, prompt_len=64, gen_len=16,
                 p2p="on", schedule=s, tokens_per_s=t, speedup=sp)
            for s, t, sp in (("standard", 100.0, 1.0), ("ladder", 130.0, 1.25), ("parallel", 120.0, None))]
    frame = validate(pd.DataFrame(rows), ValidationSetup(h100, h100))
    speedups = dict(zip(frame["schedule"], frame["measured_speedup"]))
    assert speedups == pytest.approx({"standard": 1.0, "ladder": 1.25, "parallel": 1.2})
    ladder = frame[frame["schedule"] == "ladder"].iloc[0]
    assert ladder["speedup_error_pp"] == pytest.approx((ladder["predicted_speedup"] - 1.25) * 100)


# ---- the AllReduce table fitted non-decreasing in size (laddersim/fitting/monotone.py) ----

def test_nondecreasing_fit_pools_a_flat_noisy_stretch_at_its_median_and_keeps_a_growing_curve():
    from laddersim.fitting.monotone import nondecreasing_fit

    # gloo on 2 shared cores (a closed-loop run's table, us): 1-64 KiB are all latency; one point
    # 30% low among them moves the pooled level no more than a median allows.
    measured = [1934, 1923, 1773, 1802, 1779, 1270, 1680, 2198, 3106, 6452]
    assert list(nondecreasing_fit(measured)) == [1779.0] * 7 + [2198.0, 3106.0, 6452.0]
    growing = [1.0, 2.0, 2.0, 5.0]
    assert list(nondecreasing_fit(growing)) == growing
    assert list(nondecreasing_fit([2.0, 1.0])) == [1.5, 1.5]
    assert list(nondecreasing_fit([5.0, 1.0, 1.0], weights=[1, 1, 3])) == [1.0, 1.0, 1.0]  # weighted


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(0.1, 1e4), min_size=1, max_size=12))
def test_nondecreasing_fit_is_nondecreasing_within_the_values_range_and_idempotent(values):
    from laddersim.fitting.monotone import nondecreasing_fit

    fitted = nondecreasing_fit(values)
    assert len(fitted) == len(values) and (np.diff(fitted) >= 0).all()
    assert min(values) <= fitted.min() and fitted.max() <= max(values)
    assert list(nondecreasing_fit(fitted)) == list(fitted)


def test_each_allreduce_curve_is_fitted_on_its_own_and_only_where_collectives_share_the_cores():
    from laddersim.fitting.run_context import collectives_on_host_cores
    from laddersim.fitting.monotone import nondecreasing_in_size

    frame = pd.DataFrame({"group_size": [2, 2, 2, 4, 4], "nodes": 1, "dtype": "float32", "mode": "eager",
                          "size_bytes": [4096, 1024, 2048, 1024, 2048], "reps": 30,
                          "time_us": [300.0, 200.0, 100.0, 50.0, 40.0]})
    fitted = nondecreasing_in_size(frame)
    assert list(fitted["time_us"]) == [300.0, 150.0, 150.0, 45.0, 45.0]  # by size, per group size
    assert list(frame["time_us"]) == [300.0, 200.0, 100.0, 50.0, 40.0]  # the measurements kept
    assert collectives_on_host_cores({"backend": "gloo", "device": "cpu"})
    assert not collectives_on_host_cores({"backend": "nccl", "device": "cuda"})
    assert not collectives_on_host_cores({"source": "nccl-tests", "backend": "nccl", "device": "cuda"})
