"""FlashAttention-2's split-KV decode grid as the diagnostic tools/dev/flash_decode_gap.py reasons it:
the num_splits heuristic on hand-worked cases, the packed GQA rows, and the diagnostic's end-to-end
run on the shipped flash table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("flash_decode_gap", ROOT / "tools" / "dev" / "flash_decode_gap.py")
gap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gap)


@pytest.mark.parametrize("blocks, n_blocks, splits", [
    (24, 5, 5),      # paper 1B TP 1 batch 1: every eligible split under one wave, the most blocks wins
    (8, 12, 12),     # 8B TP 1 batch 1 (8 KV heads, 1536 / 128 tiles): 5, 7-11 ineligible, 12 best
    (128, 12, 2),    # 8B batch 16: two splits already fill 256 of 264 slots (97%)
    (212, 5, 1),     # >= 0.8 x 264 blocks: one split
    (211, 5, 5),     # just under: s = 1, 2, 3 fill 0.799 of their waves, 4 ineligible (2 tiles a split
                     # as with 3), 5 fills 1055 / 1056: 0.799 < 0.85 x 0.999, so 5
])
def test_num_splits_hand_worked(blocks, n_blocks, splits):
    assert gap.num_splits_heuristic(blocks, 264, n_blocks) == splits


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 64))
def test_num_splits_bounded_and_one_when_the_sms_are_full(blocks, n_blocks):
    splits = gap.num_splits_heuristic(blocks, 264, n_blocks)
    assert 1 <= splits <= max(1, n_blocks)
    if blocks >= 0.8 * 264:
        assert splits == 1


def test_gqa_packs_its_group_into_the_rows_and_mha_does_not():
    gqa = gap.flash_grid(batch=16, heads=32, kv_heads=8, head_dim=128, max_seq_len=1536)
    mha = gap.flash_grid(batch=16, heads=24, kv_heads=24, head_dim=64, max_seq_len=1280)
    assert (gqa["blocks"], gqa["rows_per_tile"], gqa["splits"]) == (128, 4, 2)
    assert (mha["blocks"], mha["rows_per_tile"], mha["splits"]) == (384, 1, 1)
    assert gqa["tile_bytes"] == mha["tile_bytes"] == 65536  # 2 x 128 x 128 x 2 and 2 x 256 x 64 x 2


def test_the_diagnostic_runs_on_the_flash_table(capsys):
    assert gap.main(["--tp", "4"]) == 0
    out = capsys.readouterr().out
    assert "llama-3.1-8b (TP 4" in out and "K/V read: measured" in out
