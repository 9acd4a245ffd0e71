"""tools/dev/parallel_gain_gap.py (parallel at TP 2 batch 4): the per-layer gains between schedules
from decode seconds or, without them, from tokens/s; the stacked weight's bytes; the run on the
shipped tables."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from laddersim.model.shape import load_model_shape

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("parallel_gain_gap", ROOT / "tools" / "dev" / "parallel_gain_gap.py")
gap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gap)
LLAMA_8B = load_model_shape("llama-3.1-8b")


def _rows(decode: dict[str, tuple[float, float]] | None, tps: dict[str, tuple[float, float]]) -> pd.DataFrame:
    rows = []
    for schedule, (measured, predicted) in tps.items():
        row = {"p2p": "on", "tp": 2, "batch": 4, "gen_len": 512, "schedule": schedule,
               "tokens_per_s": measured, "predicted_tokens_per_s": predicted}
        if decode is not None:
            row["decode_s"], row["predicted_decode_s"] = decode[schedule]
        rows.append(row)
    return pd.DataFrame(rows)


def test_gains_from_decode_seconds_golden():
    # 0.1 s of decode over 32 layers x 512 steps: 6.1035 us a layer and step
    frame = _rows({"standard": (1.2, 1.2), "desync_half": (1.0, 1.0), "parallel": (0.9, 0.8)},
                  {"standard": (1.0, 1.0), "desync_half": (1.0, 1.0), "parallel": (1.0, 1.0)})
    row = gap.layer_gains(frame, LLAMA_8B).iloc[0]
    unit = 1e6 / (32 * 512)
    assert row["desync_half-parallel meas"] == pytest.approx(0.1 * unit)
    assert row["desync_half-parallel pred"] == pytest.approx(0.2 * unit)
    assert row["standard-desync_half meas"] == pytest.approx(0.2 * unit)
    assert row["gap"] == pytest.approx(0.1 * unit)
    assert row["gap_vs_standard"] == pytest.approx(0.1 * unit)  # standard: 0.3 meas, 0.4 pred


def test_gains_from_tokens_per_s_without_decode_seconds():
    # batch 4 x 512 tokens at 1024 vs 2048 tokens/s: 2 s vs 1 s, 1 s over 32 x 512 layer-steps
    frame = _rows(None, {"standard": (1024.0, 1024.0), "parallel": (2048.0, 4096.0)})
    row = gap.layer_gains(frame, LLAMA_8B).iloc[0]
    unit = 1e6 / (32 * 512)
    assert row["standard-parallel meas"] == pytest.approx(1.0 * unit)
    assert row["standard-parallel pred"] == pytest.approx(1.5 * unit)
    assert "gap" not in row.index  # no desync_half measured
    assert row["gap_vs_standard"] == pytest.approx(0.5 * unit)


def test_stacked_weight_bytes_golden():
    # Llama-3.1-8B at TP 2: QKV (16 + 2 x 4) x 128 = 3072 wide, gate/up 2 x 7168, k = 4096, fp16
    assert gap.stacked_weight_bytes(LLAMA_8B, 2) == (3072 + 14336) * 4096 * 2
    assert gap.stacked_weight_bytes(LLAMA_8B, 1) == 2 * gap.stacked_weight_bytes(LLAMA_8B, 2)


def test_a_missing_table_is_exit_2(tmp_path, capsys):
    assert gap.main([str(tmp_path / "none.csv")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_run_on_the_shipped_tables(capsys):
    assert gap.main([]) == 0
    out = capsys.readouterr().out
    assert "ladder_8b_tp_sweep.csv: us per layer and step, from decode_s" in out
    assert "ladder_70b_tp_sweep.csv: us per layer and step, from whole run (tokens/s)" in out
