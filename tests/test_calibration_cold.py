"""Calibration in a decode step's cache state: the working set a step streams and the rotation
that reproduces it (calibration/bench_timing.py, laddersim.measure.grid.step_weight_bytes)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.measure.grid import step_weight_bytes
from laddersim.measure.options import RunOptions

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.bench_timing import cold_copies  # noqa: E402

SMALL = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
         "intermediate_size": 1536, "vocab_size": 32000}


def test_step_weight_bytes_is_every_linear_shard_and_the_lm_head(tmp_path):
    """4 layers x (QKV 384x512 + O 512x256 + gate/up 1536x512 + down 512x768) + LM head 16000x512,
    fp32, at TP 2: the closed loop's model, by hand."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL))
    layer = 384 * 512 + 512 * 256 + 1536 * 512 + 512 * 768
    expected = (4 * layer + 16000 * 512) * 4
    assert step_weight_bytes(RunOptions(out="x", models=(str(config),), tp=(2,)), 4) == expected
    # Over several TP degrees the largest (TP 1) counts; no models, nothing.
    assert step_weight_bytes(RunOptions(out="x", models=(str(config),), tp=(1, 2)), 4) > expected
    assert step_weight_bytes(RunOptions(out="x"), 4) == 0


@settings(max_examples=50, deadline=None)
@given(item=st.integers(1, 1 << 30), working_set=st.integers(1, 1 << 32), cap=st.integers(1, 1024))
def test_cold_copies_cover_the_working_set_within_the_cap(item, working_set, cap):
    copies = cold_copies(item, working_set, cap)
    assert 1 <= copies <= cap
    if copies < cap:  # enough copies that each is evicted by the others' bytes, and no more
        assert copies * item >= working_set
        assert copies == 1 or (copies - 1) * item < working_set
    assert copies == min(cap, max(1, math.ceil(working_set / item)))
