"""The step's AllReduce measured twice on shared cores: pooled into one estimate, and the ladder's
rates solved against the AllReduce the engine will simulate (laddersim/fitting/step_allreduce.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.fitting.ladder_chain import MAX_COMM_SLOWDOWN, chain_run, chain_work
from laddersim.fitting.step_allreduce import (
    collective_issue_us, ladder_chain_rows, pooled_allreduce, resolved_rates, table_allreduce_us, with_resolved_rates,
)


def _allreduce(times_us, sizes=(1024, 2048, 4096), reps=30):
    return pd.DataFrame({"world_size": 2, "group_size": 2, "nodes": 1, "dtype": "float32", "mode": "eager",
                         "size_bytes": list(sizes), "reps": reps, "stat": "mean", "time_us": list(times_us)})


def _chain(size=2048, comm_alone_us=1500.0, reps=30, model="m/config.json", **rates):
    row = {"world_size": 2, "group_size": 2, "dtype": "float32", "mode": "eager", "size_bytes": size, "m": 1,
           "n": 512, "k": 768, "model": model, "reps": reps, "gemm_alone_us": 700.0, "gemm_overlap_us": 1200.0,
           "comm_alone_us": comm_alone_us, "comm_overlap_us": 700.0, "compute_slowdown": 0.7,
           "comm_slowdown": 0.3}
    return pd.DataFrame([{**row, **rates}])


def test_the_chains_allreduce_is_pooled_into_its_size_by_repetitions_with_its_issue_added_back():
    pooled = pooled_allreduce(_allreduce([1800.0, 2000.0, 2100.0]), _chain(comm_alone_us=1500.0, reps=10), 60.0)
    # (30 x 2000 + 10 x (1500 + 60)) / 40 = 1890; the other sizes untouched
    assert pooled["time_us"].tolist() == pytest.approx([1800.0, 1890.0, 2100.0])
    assert pooled["reps"].tolist() == [30, 40, 30]


def test_a_chain_of_another_group_dtype_or_size_pools_into_nothing():
    table = _allreduce([1800.0, 2000.0, 2100.0])
    for other in (_chain(size=8192), _chain().assign(dtype="bfloat16"), _chain().assign(group_size=4)):
        assert pooled_allreduce(table, other, 60.0)["time_us"].tolist() == table["time_us"].tolist()


def test_only_the_cpu_ladder_chains_are_pooled():
    frame = pd.concat([_chain(), _chain(model="-")], ignore_index=True)
    assert len(ladder_chain_rows(frame, on_host_cores=True)) == 1
    assert ladder_chain_rows(frame, on_host_cores=False).empty  # NCCL: the GEMM-batch rows, no chain


def test_the_issue_is_the_overhead_benchmarks_collective_median():
    overhead = pd.DataFrame({"op_class": ["compute", "collective", "collective"], "time_us": [10.0, 50.0, 70.0]})
    assert collective_issue_us(overhead) == 60.0
    assert collective_issue_us(overhead.iloc[:1]) == 0.0


def test_the_table_is_read_at_the_chains_size_between_its_points():
    table = pd.DataFrame({"gpus": 2, "nodes": 1, "size_bytes": [1024, 4096], "time_us": [1000.0, 4000.0]})
    assert table_allreduce_us(table, 2, 1024) == pytest.approx(1000.0)
    assert table_allreduce_us(table, 2, 2048) == pytest.approx(2000.0)  # log-log: a straight line here
    assert table_allreduce_us(table, 4, 2048) is None


@settings(max_examples=15, deadline=None)
@given(slow_c=st.floats(0.0, 1.0), slow_a=st.floats(0.0, 3.0), table_ratio=st.floats(0.7, 1.5))
def test_rates_solved_against_the_tables_allreduce_run_the_measured_chain_with_it(slow_c, slow_a, table_ratio):
    """Whatever AllReduce the measured chain itself saw, the engine with the re-solved rates and
    the table's AllReduce ends the chain when it was measured to end, and spends in the modules
    what it measured there, where the rates can reach it: a comm rate of 0 still ending later, or
    the largest one earlier (an AllReduce slowed only while the modules run), is the bound."""
    n, module_s, issue_s, comm_s = 8, 0.0007, 0.00006, 0.0016
    ladder_s, modules_s = chain_run(chain_work(n, module_s, issue_s, comm_s), slow_c, slow_a)
    row = _chain(gemm_alone_us=module_s * 1e6, gemm_overlap_us=modules_s / n * 1e6,
                 comm_overlap_us=(ladder_s - modules_s) / n * 1e6).iloc[0]
    table_us = (comm_s * table_ratio + issue_s) * 1e6
    compute, comm = resolved_rates(row, table_us, issue_s * 1e6, n_layers=32)
    again = chain_run(chain_work(n, module_s, issue_s, comm_s * table_ratio), compute, comm)
    assert again[1] == pytest.approx(modules_s, rel=1e-3)
    if comm == 0.0:  # even unslowed, the table's AllReduce ends the chain later than measured
        assert again[0] >= ladder_s * (1 - 1e-3)
    elif comm >= MAX_COMM_SLOWDOWN * (1 - 1e-6):
        assert again[0] <= ladder_s * (1 + 1e-3)
    else:
        assert again[0] == pytest.approx(ladder_s, rel=1e-3)


def test_a_chain_whose_model_config_is_gone_keeps_its_measured_rates():
    table = pd.DataFrame({"gpus": 2, "nodes": 1, "size_bytes": [1024, 4096], "time_us": [1800.0, 2000.0]})
    chains = _chain()
    out, solved = with_resolved_rates(chains, chains, table, "eager", 60.0, lambda model: None)
    assert solved == 0 and out["comm_slowdown"].tolist() == [0.3]
    out, solved = with_resolved_rates(chains, chains, table, "eager", 60.0, lambda model: 4)
    assert solved == 1 and out["comm_slowdown"].tolist() != [0.3]
    out, solved = with_resolved_rates(chains, chains, table, "graph", 60.0, lambda model: 4)
    assert solved == 0  # timed in another mode than the table the engine reads
