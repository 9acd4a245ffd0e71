"""``calibrate fit`` solves the per-op framework cost at which the op program prices the model's own
modules as the skew benchmark measured them (laddersim.fitting.modules)."""

from __future__ import annotations

import json

import pytest

from laddersim.fitting.modules import module_anchored, module_seconds
from laddersim.measure.schema import SCHEMAS
from laddersim.hardware.compute_specs import HostOps, HostOverheadSpec
from laddersim.hardware.sourced import Sourced
from laddersim.model.shape import load_model_shape

CONFIG = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
          "intermediate_size": 1536, "vocab_size": 32000}


def _host(hw, op_us: float):
    spec = HostOverheadSpec(timing="synchronous", compute_op_us=Sourced(value=op_us, source="chains"),
                            view_op_us=Sourced(value=2.0, source="test"),
                            collective_op_us=Sourced(value=40.0, source="test"),
                            ops=[HostOps(kind="rope", compute=20, view=31), HostOps(kind="attn_norm", compute=7),
                                 HostOps(kind="mlp_norm", compute=7), HostOps(kind="qkv", compute=3, view=2),
                                 HostOps(kind="act", compute=2), HostOps(kind="attention", compute=9, view=6)],
                            ops_source="test counts")
    return hw.model_copy(update={"host_overhead": spec})


def _run_dir(tmp_path, stretch_us: float, modules: int = 16):
    tmp_path.mkdir(exist_ok=True)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    (tmp_path / "measurements").mkdir()
    (tmp_path / "run.json").write_text(json.dumps({"backend": "gloo", "world_size": 2}))
    row = {"world_size": 2, "group_size": 2, "dtype": "float32", "model": str(config), "batch": 4,
           "modules": modules, "reps": 50, "stretch_us": stretch_us * modules, "wait_us": 100.0,
           "wait_fraction": 100.0 / (stretch_us * modules)}
    columns = SCHEMAS["skew"].columns
    (tmp_path / "measurements" / "skew.csv").write_text(
        ",".join(columns) + "\n" + ",".join(str(row[c]) for c in columns) + "\n")
    return str(tmp_path), load_model_shape(str(config))


def test_the_solved_per_op_cost_prices_a_module_as_measured(tmp_path, h100):
    """Golden: modules measured at what the program prices them at 15 us per op; the chains said 6."""
    model = load_model_shape_from(tmp_path)
    truth_s = module_seconds(_host(h100, 15.0), model, 2, 4, "float32", 16)
    run_dir, model = _run_dir(tmp_path / "run", truth_s * 1e6)
    anchored, line = module_anchored(_host(h100, 6.0), run_dir)
    host = anchored.host_overhead
    assert host.compute_op_us.value == pytest.approx(15.0, rel=1e-6)
    assert module_seconds(anchored, model, 2, 4, "float32", 16) == pytest.approx(truth_s, rel=1e-9)
    assert "measurements/skew.csv" in host.compute_op_us.source and "tiny-op chains: chains" in host.compute_op_us.source
    assert "15.00 us per compute op" in line
    # Everything else in the section is as measured.
    assert host.view_op_us == _host(h100, 6.0).host_overhead.view_op_us and host.ops == _host(h100, 6.0).host_overhead.ops


def test_modules_faster_than_their_kernels_floor_the_per_op_cost_at_zero(tmp_path, h100):
    run_dir, model = _run_dir(tmp_path, 1.0)  # 1 us a module: less than its GEMMs alone
    anchored, _ = module_anchored(_host(h100, 6.0), run_dir)
    assert anchored.host_overhead.compute_op_us.value == 0.0


def test_without_a_module_measurement_or_host_section_nothing_changes(tmp_path, h100):
    (tmp_path / "empty" / "measurements").mkdir(parents=True)
    (tmp_path / "empty" / "run.json").write_text(json.dumps({"backend": "gloo", "world_size": 2}))
    profile = _host(h100, 6.0)
    assert module_anchored(profile, str(tmp_path / "empty")) == (profile, None)
    run_dir, _ = _run_dir(tmp_path / "run", 500.0)
    assert module_anchored(h100, run_dir) == (h100, None)


def load_model_shape_from(tmp_path):
    config = tmp_path / "model.json"
    config.write_text(json.dumps(CONFIG))
    return load_model_shape(str(config))


def test_a_skew_measurement_without_the_host_benchmarks_is_one_warning_line(tmp_path):
    from laddersim.fitting.host import fit_warnings

    run_dir, _ = _run_dir(tmp_path, 500.0)
    lines = [line for line in fit_warnings(run_dir) if "skew.csv" in line]
    assert len(lines) == 1 and "--benchmarks overhead,ops" in lines[0] and "\n" not in lines[0]
