"""How many repetitions a calibration point takes: the CPU chain points (the model's own modules
beside collectives) at least ``CHAIN_REPEATS`` even with ``--quick``; ``--repeats`` given wins."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from laddersim.measure.options import CHAIN_REPEATS, RunOptions

CALIBRATION = Path(__file__).parents[1] / "calibration"


@pytest.mark.parametrize("quick, repeats, plain, chain", [
    (True, 0, 5, CHAIN_REPEATS), (False, 0, 25, CHAIN_REPEATS), (True, 3, 3, 3), (False, 100, 100, 100)])
def test_chain_points_repeat_enough_unless_told(quick, repeats, plain, chain):
    opts = RunOptions(out="run", quick=quick, repeats=repeats)
    assert (opts.repeat_count, opts.chain_repeat_count) == (plain, chain)


@pytest.mark.parametrize("module", ["allreduce_bench", "allgather_bench", "interference_bench", "skew_bench"])
def test_every_chain_benchmark_takes_the_chain_count(module):
    # Each benchmark that times the model's modules beside a collective on CPU ranks loops over
    # chain_repeat_count where it builds its chain samples.
    text = (CALIBRATION / f"{module}.py").read_text()
    assert re.search(r"range\(ctx\.opts\.chain_repeat_count\)", text), module
