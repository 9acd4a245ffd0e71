"""The logits AllGather priced from a measured AllGather table (calibration/allgather_bench.py),
else as an AllReduce of half the gathered bytes."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.costs.allreduce import allgather_source, allgather_time_s, allreduce_source, allreduce_time_s


def logits_allgather(hw, fw, tp, size):
    return allgather_time_s(hw, tp, size, fw), allgather_source(hw, tp, size, fw)

from laddersim.costs.gemm_tables import SILICON
from laddersim.costs.op_costs import Phase, op_time_sources, op_times_s
from laddersim.model.framework import load_framework
from laddersim.hardware.sourced import MeasuredTable
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload

MODEL = ModelShape(name="gather-test", n_layers=4, dim=1024, n_heads=16, n_kv_heads=4,
                   intermediate_size=4096, vocab_size=32000)


def with_gather_table(profile, tmp_path, rows: list[tuple[int, int, int, float]]):
    """``profile`` with one AllGather table (gpus, nodes, gathered bytes, time_us), timed as its
    AllReduce tables are (no launch correction)."""
    path = tmp_path / "allgather.csv"
    path.write_text("# a test table\ngpus,nodes,size_bytes,time_us\n"
                    + "".join(f"{g},{n},{s},{t}\n" for g, n, s, t in rows))
    like = profile.collectives.tables[0]
    table = MeasuredTable(file=str(path), source="test table", mode=like.mode, timing=like.timing)
    # Validated anew (a model_copy would carry the source profile's cached table arrays along).
    collectives = profile.collectives.model_copy(update={"allgather_tables": [table]})
    fields = {name: getattr(profile, name) for name in type(profile).model_fields}
    return type(profile).model_validate({**fields, "collectives": collectives})


def test_a_covered_gather_is_read_from_its_table_and_interpolated(h100, tmp_path):
    hw = with_gather_table(h100, tmp_path, [(8, 1, 64_000, 10.0), (8, 1, 256_000, 20.0)])
    fw = load_framework("gpt-fast")
    assert logits_allgather(hw, fw, 8, 64_000) == (pytest.approx(10e-6), SILICON)
    assert logits_allgather(hw, fw, 8, 256_000) == (pytest.approx(20e-6), SILICON)
    middle, source = logits_allgather(hw, fw, 8, 128_000)
    assert 10e-6 < middle < 20e-6 and source == SILICON


def test_outside_the_table_or_its_group_the_gather_is_half_its_bytes_reduced(h100, tmp_path):
    hw = with_gather_table(h100, tmp_path, [(8, 1, 64_000, 10.0), (8, 1, 256_000, 20.0)])
    fw = load_framework("gpt-fast")
    for tp, size in ((8, 1_000_000), (8, 1_000), (4, 128_000)):
        assert logits_allgather(hw, fw, tp, size) == (allreduce_time_s(hw, tp, size / 2, fw, custom=False),
                                                     allreduce_source(hw, tp, size / 2, fw, custom=False))
        assert logits_allgather(hw, fw, tp, size) == logits_allgather(h100, fw, tp, size)


def test_a_single_measured_size_prices_that_size_only(h100, tmp_path):
    hw = with_gather_table(h100, tmp_path, [(2, 1, 128_000, 700.0)])
    fw = load_framework("gpt-fast")
    assert logits_allgather(hw, fw, 2, 128_000) == (pytest.approx(700e-6), SILICON)
    assert allgather_time_s(hw, 2, 256_000, fw) == allreduce_time_s(hw, 2, 128_000, fw)


def test_a_decode_step_charges_the_gather_of_its_batch_from_the_table(h100, tmp_path):
    tp, batch = 8, 4
    gathered = batch * MODEL.vocab_per_rank(tp) * tp * 2  # bfloat16 logits
    hw = with_gather_table(h100, tmp_path, [(tp, 1, gathered, 55.0)])
    work = Workload(batch=batch, prompt_len=64, gen_len=4)
    phase = Phase("decode", batch, 1)
    times = op_times_s(MODEL, hw, work, tp, phase, np.array([64.0]))
    plain = op_times_s(MODEL, h100, work, tp, phase, np.array([64.0]))
    # the table's time, plus the NCCL kernel's start-up behind its producer, which every collective
    # op carries on the communication stream (framework.collective_sync_us; not in a table's timing)
    sync_s = hw.framework.collective_sync_us.value * 1e-6
    assert sync_s > 0
    assert float(np.ravel(times["allgather_logits"])[0]) == pytest.approx(55e-6 + sync_s)
    assert op_time_sources(MODEL, hw, work, tp, phase)["allgather_logits"] == SILICON
    # Nothing else moves: the table replaces the gather's price only.
    assert {k: np.ravel(v).tolist() for k, v in times.items() if k != "allgather_logits"} == \
        {k: np.ravel(v).tolist() for k, v in plain.items() if k != "allgather_logits"}
