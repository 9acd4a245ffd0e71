"""Fuzz every input laddersim reads: a mutated input is exit 2 with one stderr line and no
traceback, or exit 0 with finite, positive results (tools/dev/fuzz_inputs.py judges; hypothesis picks
the mutation and the bad value). Past failures stay in tests/data/fuzz_corpus/ as regression cases.

Runs in-process (``laddersim.cli.main``): 458 generated cases plus the corpus; the serving and
planning inputs (serving flags, arrival traces, a sweep grid's ``serving:`` section, ``plan --rate``)
are kinds of their own, and every case of issue #31 is in the corpus.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("fuzz_inputs", ROOT / "tools" / "dev" / "fuzz_inputs.py")
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["fuzz_inputs"] = fuzz  # dataclasses look their module up while the class is built
_spec.loader.exec_module(fuzz)

CORPUS = sorted(p for p in fuzz.CORPUS.glob("*.json"))
# Examples per kind: the cheap readers get more (their cases fail fast or simulate a tiny model).
EXAMPLES = {"profile": 55, "hf_config": 55, "sweep_grid": 50, "prices": 40, "nccl_log": 35, "points_jsonl": 25,
            "cli_args": 30, "measured_csv": 25, "run_dir": 10, "results_csv": 8,
            "serving_args": 40, "arrival_trace": 30, "serving_grid": 30, "plan_rate": 25}

bad_values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.lists(st.integers(min_value=-5, max_value=5), max_size=3),
    st.sampled_from(["!!float 'nope'", "0x10", "1e400", "nan", "-1", "\u00e9"]),
)


def _judge(case) -> tuple[str, str]:
    outcome, detail = fuzz.run_case(case, time_limit_s=60)
    assert outcome in fuzz.GOOD, f"{case.kind}: {outcome}: {detail}\nargv={case.argv} note={case.note}"
    return outcome, detail


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_mutated_inputs_are_one_line_errors_or_sane_results(kind):
    @settings(max_examples=EXAMPLES[kind], deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(min_value=0, max_value=2**32 - 1), value=bad_values)
    def check(seed, value):
        _judge(fuzz.make_case(kind, seed, value))

    check()


def test_at_least_300_generated_cases():
    assert sum(EXAMPLES.values()) >= 300 and set(EXAMPLES) == set(fuzz.KINDS)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_past_failures_stay_fixed(path):
    data = json.loads(path.read_text())
    outcome, detail = _judge(fuzz.Case.from_json(data))
    assert data["expect"] in detail, f"expected {data['expect']!r} in {detail!r}"
    if data["expect"].startswith("error"):
        assert outcome == "error"
    assert outcome == data.get("expect_outcome", outcome), detail
    assert not data.get("reject") or data["reject"] not in detail, detail


def test_corpus_covers_the_reported_failures():
    names = {p.stem for p in CORPUS}
    assert {"non_utf8_profile", "yaml_constructor_error_prices", "validate_report_is_a_file", "fit_only_p2p_off_rows",
            "grid_int_2_pow_64", "points_jsonl_empty_object", "nccl_log_times_1e30",
            "sweep_intra_latency_1e400", "fit_numeric_schedule_cell", "sweep_out_under_sys"} <= names
    assert {  # issue #31
        "serving_capacity_every_rate_passes", "serving_capacity_70b_chunked_every_rate_passes",
        "plan_rate_every_rate_passes_lists_the_configuration", "trace_arrivals_at_one_instant",
        "trace_arrivals_at_one_instant_zero_attainment", "serving_gamma_shape_1e-300", "serving_seed_negative",
        "serving_prompt_len_beyond_int64", "serving_prompt_len_exponential_inf", "serving_requests_int32_max",
        "sweep_serving_ttft_slo_1e400", "sweep_serving_rate_inf_string", "yaml_alias_bomb_prices",
        "yaml_alias_bomb_grid", "yaml_alias_bomb_profile", "simulate_trace_steps_superscript",
        "plot_blank_cell_is_empty", "plan_price_inf_string"} <= names
    assert {  # issue #31 follow-up: plan --rate plans around a candidate that cannot serve the workload
        "plan_rate_request_beyond_the_iteration_budget", "plan_rate_request_beyond_one_candidates_kv_cache"} <= names


def test_judge_catches_what_it_must():
    """The oracle itself: a traceback, a second error line and a non-finite result are failures."""
    assert fuzz.run_case(fuzz.Case("cli_args", ["simulate", "--model", "tiny.json"], {}))[0] == "error"
    assert not fuzz._finite_positive([math.nan]) and not fuzz._finite_positive([0.0])
    assert fuzz._finite_positive([1.0, 2])
    # serving answers: a capacity below an offered rate that met the SLOs (the old "no rate found"),
    # an infinite offered rate, percentiles out of order
    row = {"schedule": "ladder", "rate": 16.0, "slo_attainment": 1.0, "slo_attainment_required": 0.9,
           "capacity_req_per_s": None, "ttft_p50_s": 0.1, "ttft_p90_s": 0.2, "ttft_p99_s": 0.3}
    assert "met the SLOs" in fuzz._serving_row_nonsense(row)
    assert fuzz._serving_row_nonsense({**row, "capacity_req_per_s": 20.0}) is None
    assert "figure" in fuzz._serving_row_nonsense({**row, "capacity_req_per_s": 20.0, "offered_rate": math.inf})
    assert "order" in fuzz._serving_row_nonsense({**row, "capacity_req_per_s": 20.0, "ttft_p90_s": 0.5})
    with pytest.raises(ValueError):
        json.loads('[{"offered_rate": Infinity}]', parse_constant=fuzz._no_constant)
