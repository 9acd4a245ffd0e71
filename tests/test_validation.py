"""`laddersim validate` and `laddersim fit`: against the paper's measurements, and closed loops
where the "measurements" come from a known profile so the right answer is known."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from laddersim.cli import main
from laddersim.errors import UserInputError
from laddersim.fitting.row_parameters import apply
from laddersim.fitting.rows import fit_profiles, save_profile
from laddersim.costs.collectives import alpha_beta_time_s
from laddersim.hardware.comm_specs import ProtocolTerm, TierFit
from laddersim.hardware.profile import load_profile
from laddersim.hardware.sourced import Sourced
from laddersim.validation import ValidationSetup, error_summary, read_measured, validate
from laddersim.validation import figure
from laddersim.validation.core import BUILTIN_MEASURED
from laddersim.validation.figure import model_label


def test_builtin_copy_is_the_papers_70b_figure():
    frame = read_measured()
    assert len(frame) == 70 and set(frame["model"]) == {"llama-3.1-70b"}
    # Headline numbers quoted in ../shared/docs/ladder-residual.md: TP8 batch 1 ladder is 1.31x
    # standard with P2P on and 1.60x with P2P off.
    def tps(p2p, schedule):
        row = frame[(frame.tp == 8) & (frame.batch == 1) & (frame.p2p == p2p) & (frame.schedule == schedule)]
        return float(row["tokens_per_s"].iloc[0])
    assert tps("on", "ladder") / tps("on", "standard") == pytest.approx(1.31, abs=0.01)
    assert tps("off", "ladder") / tps("off", "standard") == pytest.approx(1.60, abs=0.01)


@pytest.fixture(scope="module")
def paper_validation():
    return validate()


def test_shipped_profiles_predict_the_paper_within_the_acceptance_bounds(paper_validation):
    """Issue 5 acceptance: shipped profiles (no fit to these rows): tokens/s median |error| <= 10%,
    speedup over standard median |error| <= 4 points."""
    summary = error_summary(paper_validation).iloc[0]
    assert summary["tokens_per_s_median_abs_err_pct"] <= 10.0
    assert summary["speedup_median_abs_err_pp"] <= 4.0


def test_the_papers_trends_come_out(paper_validation):
    lad = paper_validation[paper_validation["schedule"] == "ladder"].set_index(["p2p", "tp", "batch"])["predicted_speedup"]
    assert lad[("on", 2, 1)] < lad[("on", 4, 1)] < lad[("on", 8, 1)]  # grows with TP
    for tp, batch in [(8, 1), (8, 16), (4, 4)]:
        assert lad[("off", tp, batch)] > lad[("on", tp, batch)]  # grows when P2P is off
    assert lad[("on", 8, 64)] < lad[("on", 8, 1)]  # shrinks with batch
    std = paper_validation[paper_validation["schedule"] == "standard"]
    assert (std["predicted_speedup"] == 1.0).all()


def _tiny_measured(tmp_path, profile, schedules=("standard", "ladder", "parallel", "upper_bound"), p2p="on"):
    cfg = {"hidden_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 16, "num_key_value_heads": 4,
           "intermediate_size": 4096, "vocab_size": 32000, "_name_or_path": "tiny"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rows = [dict(model=str(path), tp=tp, nodes=1, batch=batch, prompt_len=64, gen_len=16, p2p=p2p,
                 schedule=s, tokens_per_s=1.0)
            for tp in (2, 4, 8) for batch in (1, 8, 32) for s in schedules]
    frame = pd.DataFrame(rows)
    truth = validate(frame, ValidationSetup(hardware=profile, hardware_p2p_off=profile))
    frame["tokens_per_s"] = truth["predicted_tokens_per_s"]
    return frame


def _perturbed(profile, **values):
    """``profile`` as a fit with these values (laddersim.fitting.row_parameters) would make it: the truth."""
    return apply(profile, values, "test truth")


def test_fit_recovers_known_parameters_and_predicts_held_out_schedules(tmp_path, h100):
    truth = _perturbed(h100, step_overhead_us=400.0, device_speed_scale=0.9, allreduce_latency_scale=1.4,
                       allreduce_bandwidth_scale=0.7, single_token_kernel_floor_us=1.0)
    measured = _tiny_measured(tmp_path, truth)
    # upper_bound rows (no communication) beside standard ones see the AllReduce apart from compute.
    fitted_schedules = ("standard", "upper_bound")
    result = fit_profiles(measured, {"on": h100}, ValidationSetup(), schedules=fitted_schedules, priors=False)
    p = result.parameters
    assert p["step_overhead_us"] == pytest.approx(400.0, rel=0.03)
    assert p["device_speed_scale"] == pytest.approx(0.9, rel=0.01)
    assert p["compute_efficiency_scale"] == pytest.approx(1.0, rel=0.02)
    assert p["kernel_launch_us"] == pytest.approx(h100.gpu.kernel_launch_us.value, rel=0.05)
    assert p["single_token_kernel_floor_us"] == pytest.approx(1.0, abs=0.1)
    assert p["allreduce_latency_scale[p2p=on]"] == pytest.approx(1.4, rel=0.03)
    assert p["allreduce_bandwidth_scale[p2p=on]"] == pytest.approx(0.7, rel=0.05)
    held_out = result.all_rows[~result.all_rows["schedule"].isin(fitted_schedules)]
    assert set(held_out["schedule"]) == {"ladder", "parallel"}
    assert held_out["rel_error"].abs().max() < 0.005
    fitted = result.profiles["on"]
    # Kept from the base, and the provenance says why.
    assert fitted.framework.collective_sync_us == h100.framework.collective_sync_us
    assert fitted.framework.collective_input_copies == h100.framework.collective_input_copies
    assert fitted.interference == h100.interference
    assert "interference" in fitted.provenance["fit_kept"]
    assert fitted.provenance["fit_priors"] == "none"
    assert fitted.framework.step_overhead_us.source.startswith("fit: ")
    # The fitted profile round-trips through YAML and predicts the same.
    path = save_profile(fitted, tmp_path / "fitted.yaml", name="fitted")
    again = validate(measured, ValidationSetup(hardware=load_profile(path)))
    np.testing.assert_allclose(again["predicted_tokens_per_s"], result.all_rows["predicted_tokens_per_s"], rtol=1e-9)


def test_fit_priors_hold_a_microbenchmarked_scale_the_rows_barely_move(tmp_path, h100):
    # Rows from a machine whose AllReduce floor is 40% above the table: the prior pulls the
    # fitted scale toward the measured table (1.0) without stopping it from moving.
    truth = _perturbed(h100, step_overhead_us=400.0, allreduce_latency_scale=1.4)
    measured = _tiny_measured(tmp_path, truth, schedules=("standard", "upper_bound"))
    result = fit_profiles(measured, {"on": h100}, ValidationSetup(), schedules=("standard", "upper_bound"))
    scale = result.parameters["allreduce_latency_scale[p2p=on]"]
    assert 1.0 < scale < 1.38
    assert "sigma" in result.profiles["on"].provenance["fit_priors"]


def test_validate_cli_writes_a_report(tmp_path, capsys, h100):
    measured = _tiny_measured(tmp_path, h100, schedules=("standard", "ladder"))
    csv = tmp_path / "measured.csv"
    measured.to_csv(csv, index=False)
    out = tmp_path / "report"
    assert main(["validate", str(csv), "--report", str(out)]) == 0  # the same flag as `laddersim fit`
    printed = capsys.readouterr().out
    assert "tokens_per_s_median_abs_err_pct" in printed
    assert (out / "index.md").exists() and (out / "tokens_per_s_vs_tp.png").stat().st_size > 10_000
    frame = pd.read_csv(out / "validation.csv")
    assert frame["rel_error"].abs().max() < 1e-5  # measured rows were made by this very profile
    # The report records what made it: the laddersim version and each profile's hash.
    from laddersim.support.provenance import laddersim_version, profile_sha256

    report = (out / "index.md").read_text()
    assert f"Made by laddersim {laddersim_version()}" in report
    assert f"`h100-sxm-nvswitch` {profile_sha256(h100)[:16]}" in report


def test_validate_splits_figure_and_trends_by_model_and_prompt_length(tmp_path, capsys, monkeypatch, h100):
    # A user's table rarely has one prompt length and one model: each setting gets its own panel
    # and its own trend checks (two rows per TP and schedule in one panel used to crash the figure).
    tiny = _tiny_measured(tmp_path, h100, schedules=("standard", "ladder"))
    longer = tiny.assign(prompt_len=128)
    llama = tiny[tiny["batch"] == 1].assign(model="llama-3.1-8b", prompt_len=256)
    frame = pd.concat([tiny, longer, llama], ignore_index=True)
    csv = tmp_path / "measured.csv"
    frame.to_csv(csv, index=False)
    out = tmp_path / "report"
    assert main(["validate", str(csv), "--report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "prompt_len" in printed and "llama-3.1-8b" in printed  # the columns that vary are shown
    report = (out / "index.md").read_text()
    name = model_label(tiny["model"].iloc[0])  # the config.json's folder
    assert f"speedup shrinks with batch (TP 8, P2P on, {name}, prompt 64)" in report
    assert f"speedup shrinks with batch (TP 8, P2P on, {name}, prompt 128)" in report
    assert "ladder speedup grows with TP (batch 1, P2P on, llama-3.1-8b, prompt 256)" in report
    titles = []
    monkeypatch.setattr(figure, "save_validation_figure", lambda fig, out_base: titles.extend(
        ax.get_title() for ax in fig.axes if ax.get_visible()) or [])
    figure.paper_figure(pd.read_csv(out / "validation.csv"), tmp_path / "again")
    assert sorted(titles) == sorted([f"{name}, batch {b}, prompt {p}, P2P on" for b in (1, 8, 32) for p in (64, 128)]
                                    + ["llama-3.1-8b, batch 1, prompt 256, P2P on"])


def test_validate_keeps_rows_of_different_machines_apart(tmp_path, capsys, h100):
    # A `hardware` column puts one setting on two machines: a panel and a trend group each.
    tiny = _tiny_measured(tmp_path, h100, schedules=("standard", "ladder"))
    frame = pd.concat([tiny.assign(hardware="h100-sxm-nvswitch"), tiny.assign(hardware="a100-sxm-nvswitch")],
                      ignore_index=True)
    csv = tmp_path / "measured.csv"
    frame.to_csv(csv, index=False)
    out = tmp_path / "report"
    assert main(["validate", str(csv), "--report", str(out)]) == 0
    report = (out / "index.md").read_text()
    for machine in ("h100-sxm-nvswitch", "a100-sxm-nvswitch"):
        assert f"ladder speedup grows with TP (batch 8, P2P on, {machine})" in report
    result = pd.read_csv(out / "validation.csv")
    h100_rows = result[result["hardware"] == "h100-sxm-nvswitch"]
    assert h100_rows["rel_error"].abs().max() < 1e-5 and result["rel_error"].abs().max() > 0.05


def test_validate_with_ladder_rows_only_checks_no_trend(tmp_path, h100):
    # Without standard rows there is no speedup: no trend is a "MISS nan -> nan".
    from laddersim.validation.report import write_report

    frame = validate(_tiny_measured(tmp_path, h100, schedules=("ladder",)), ValidationSetup(h100, h100))
    report = write_report(frame, tmp_path / "r", "test").read_text()
    assert "nan" not in report.split("## Trends")[1].split("##")[0]
    assert "none to check" in report


def test_tp1_stand_in_is_one_row_per_setting():
    # 70B and 405B fit no single GPU: llama-3.1-8b stands in, once per batch and lengths.
    from laddersim.api.validation_task import tp1_check

    frame = pd.DataFrame([dict(model=m, batch=1, prompt_len=8, gen_len=4)
                          for m in ("llama-3.1-70b", "llama-3.1-405b")])
    table = tp1_check(frame, ValidationSetup())
    assert len(table) == 1 and table["model"].iloc[0].startswith("llama-3.1-8b (stand-in")
    assert table["ladder_speedup"].iloc[0] == pytest.approx(1.0, abs=0.01)


def test_a_dtype_column_is_simulated_in_its_own_dtype(tmp_path, h100):
    # ladder_bench writes the dtype it ran; validate used to simulate --dtype's default instead.
    frame = _tiny_measured(tmp_path, h100, schedules=("standard",))
    as_fp32 = validate(frame, ValidationSetup(h100, h100, dtype="float32"))
    with_column = validate(frame.assign(dtype="float32"), ValidationSetup(h100, h100, dtype="float16"))
    np.testing.assert_allclose(with_column["predicted_tokens_per_s"], as_fp32["predicted_tokens_per_s"])
    assert not np.allclose(with_column["predicted_tokens_per_s"], frame["tokens_per_s"])


def test_two_dtypes_of_one_setting_are_two_settings(tmp_path, h100):
    # ladder_bench resumes per dtype, so a table can hold a float32 and a bfloat16 run of one
    # setting: each is its own row, its speedup taken over the standard row of its dtype.
    frame = _tiny_measured(tmp_path, h100, schedules=("standard", "ladder"))
    both = pd.concat([frame.assign(dtype="float32"), frame.assign(dtype="bfloat16")], ignore_index=True)
    csv = tmp_path / "both.csv"
    both.to_csv(csv, index=False)
    result = validate(read_measured(csv), ValidationSetup(h100, h100))
    for dtype in ("float32", "bfloat16"):
        alone = validate(frame.assign(dtype=dtype), ValidationSetup(h100, h100))
        np.testing.assert_allclose(result.loc[result["dtype"] == dtype, "predicted_speedup"],
                                   alone["predicted_speedup"], rtol=1e-12)
    assert not np.allclose(result.loc[result["dtype"] == "float32", "predicted_tokens_per_s"],
                           result.loc[result["dtype"] == "bfloat16", "predicted_tokens_per_s"])
    # The report gives each dtype its figure panels and trend checks.
    assert main(["validate", str(csv), "--out", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "index.md").read_text()
    assert "batch 1, P2P on, float32)" in report and "batch 1, P2P on, bfloat16)" in report
    repeated = tmp_path / "repeated.csv"
    pd.concat([both, both.iloc[:1]], ignore_index=True).to_csv(repeated, index=False)
    with pytest.raises(UserInputError, match="same setting and schedule"):
        read_measured(repeated)


@pytest.mark.parametrize("content,message", [
    ("model,tp\nllama-3.1-70b,8\n", "lacks columns"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s,mode\n"
     "llama-3.1-70b,8,1,1,8,8,on,standard,1,eager\nllama-3.1-70b,8,1,1,8,8,on,standard,2,compile\n",
     "mixes mode values (compile, eager); validate one mode at a time"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s,dtype\n"
     "llama-3.1-70b,8,1,1,8,8,on,standard,1,bfloat16\nllama-3.1-70b,8,1,1,8,8,on,ladder,12.\n",
     "dtype in row 2 of"),  # a row cut short mid-write: keyed apart, it crashed the figure
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s,dtype\nllama-3.1-70b,8,1,1,8,8,on,standard,1,bf16\n",
     "is 'bf16'; allowed: float16, bfloat16, float32, fp8"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\nllama-3.1-70b,8,1,1,8,8,maybe,standard,1\n",
     "p2p values ['maybe']"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\nllama-3.1-70b,eight,1,1,8,8,on,standard,1\n",
     "tp must be a positive whole number in every row"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\nllama-3.1-70b,8.5,1,1,8,8,on,standard,1\n",
     "row 1 has 8.5"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\nllama-3.1-70b,8,1,1,8,8,on,standard,fast\n",
     "tokens_per_s must be positive numbers"),
    ("", "cannot read"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\nllama-3.1-70b,8,1,1,8,8,on,sideways,1\n",
     "schedule: unknown 'sideways'"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\nllama-3.1-70b,3,1,1,8,8,on,standard,1\n",
     "tp"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\nllama-3.1-70b,8,1,1,8,8,on,standard,1,5\n",
     "more fields than its header"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\n"
     "llama-3.1-70b,8,1,1,8,8,on,standard,1\nllama-3.1-70b,8,1,1,8,8,on,ladder,1\n"
     "llama-3.1-70b,8,1,4,8,8,on,standard,1\nllama-3.1-70b,8,1,1,8,8,on,ladder,2\n",
     "rows 2 and 4 of"),
    ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\nllama-3.1-405b,2,1,1,8,8,on,standard,1\n",
     "memory: llama-3.1-405b at tp=2"),
])
def test_validate_rejects_bad_tables(tmp_path, capsys, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    assert main(["validate", str(path), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_fit_needs_standard_rows(tmp_path, capsys):
    frame = read_measured(BUILTIN_MEASURED)
    path = tmp_path / "no_standard.csv"
    frame[(frame["schedule"] != "standard") & (frame["p2p"] == "on")].to_csv(path, index=False)
    assert main(["fit", str(path), "--hardware", "h100-sxm-nvswitch", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "no 'standard' rows" in capsys.readouterr().err


def test_fit_fits_one_machine_of_a_hardware_column(tmp_path, capsys, h100):
    # Rows naming another machine would be simulated on it, untouched by the fit: refused.
    truth = _perturbed(h100, step_overhead_us=400.0)
    measured = _tiny_measured(tmp_path, truth, schedules=("standard",))
    mixed = pd.concat([measured.assign(hardware="h100-sxm-nvswitch"), measured.assign(hardware="a100-sxm-nvswitch")],
                      ignore_index=True)
    path = tmp_path / "mixed.csv"
    mixed.to_csv(path, index=False)
    assert main(["fit", str(path), "--hardware", "h100-sxm-nvswitch", "--out", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"row {len(measured) + 1} names hardware a100-sxm-nvswitch" in err
    # The base machine's own rows keep their column and are fitted.
    one = measured.assign(hardware="h100-sxm-nvswitch")
    result = fit_profiles(one, {"on": h100}, ValidationSetup(), schedules=("standard",))
    assert abs(result.parameters["step_overhead_us"] - 400.0) < 20.0


def test_standard_rows_alone_move_every_allreduce_model_only_with_the_machine(tmp_path, h100):
    # Standard rows cannot tell the AllReduce from the kernels around it (both change with TP), nor
    # how much of it an overlapping schedule hides: a collective the profile measured (its tables)
    # and one built from mechanisms (the P2P-off profile) move only with the machine's common
    # speed (none of the AllReduce's own scales is fitted), and the provenance says so; the other
    # parameters are still fitted.
    off = load_profile("h100-sxm-p2p-off")
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    measured = pd.concat([_tiny_measured(tmp_path / "on", _perturbed(h100, step_overhead_us=400.0,
                                                                     device_speed_scale=0.9),
                                         schedules=("standard",)),
                          _tiny_measured(tmp_path / "off", _perturbed(off, step_overhead_us=400.0,
                                                                      device_speed_scale=0.9),
                                         schedules=("standard",), p2p="off")], ignore_index=True)
    result = fit_profiles(measured, {"on": h100, "off": off}, ValidationSetup(), schedules=("standard",),
                          priors=False)
    assert not [name for name in result.parameters if name.startswith("allreduce_")]
    assert result.parameters["step_overhead_us"] == pytest.approx(400.0, rel=0.03)
    speed = result.parameters["device_speed_scale"]
    assert speed == pytest.approx(0.9, rel=0.01)
    for key, base in (("on", h100), ("off", off)):
        fitted = result.profiles[key]
        assert fitted.what_if.intra_latency_scale == pytest.approx(base.what_if.intra_latency_scale / speed)
        assert fitted.what_if.intra_bandwidth_scale == pytest.approx(base.what_if.intra_bandwidth_scale * speed)
        assert fitted.collectives.intra_node_fits == base.collectives.intra_node_fits
        assert "the AllReduce's own floor and bandwidth (standard rows alone" in fitted.provenance["fit_kept"]


def test_fit_gives_a_mechanism_built_collective_a_floor_per_group_size(tmp_path, h100):
    # A collective model without a measured table (the P2P-off profile) does not know how its
    # cost changes with the group (a ring crossing CPU sockets); fitted beside rows of the same
    # machine's measured collective (which pin the per-step constant), and with upper_bound rows
    # that see the collective apart from the compute, it gets a floor and a bandwidth per TP size
    # (this tiny model's messages are too small to pin the bandwidth).
    base = load_profile("h100-sxm-p2p-off")
    tier = base.collectives.intra_node
    truth_scales = {2: 1.6, 4: 1.2, 8: 1.5}
    fits = [TierFit(gpus=g, source="test truth", terms=[ProtocolTerm(
        protocol="ring", latency_us=float(alpha_beta_time_s(tier, g, 0.0)) * 1e6 * s,
        bus_bandwidth_gb_per_s=tier.bus_bandwidth_gb_per_s.value)]) for g, s in truth_scales.items()]
    truth = base.model_copy(update={"collectives": base.collectives.model_copy(update={"intra_node_fits": fits})})
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    measured = pd.concat([_tiny_measured(tmp_path / "on", h100, ("standard", "upper_bound")),
                          _tiny_measured(tmp_path / "off", truth, ("standard", "upper_bound", "ladder"), p2p="off")],
                         ignore_index=True)
    result = fit_profiles(measured, {"on": h100, "off": base}, ValidationSetup(),
                          schedules=("standard", "upper_bound"), priors=False)
    for g, s in truth_scales.items():
        assert result.parameters[f"allreduce_latency_scale@{g}[p2p=off]"] == pytest.approx(s, rel=0.03)
    assert "allreduce_latency_scale[p2p=off]" not in result.parameters
    fitted = result.profiles["off"]
    assert [f.gpus for f in fitted.collectives.intra_node_fits] == [2, 4, 8]
    for fit in fitted.collectives.intra_node_fits:
        scale = result.parameters[f"allreduce_bandwidth_scale@{fit.gpus}[p2p=off]"]
        assert fit.terms[0].bus_bandwidth_gb_per_s == pytest.approx(tier.bus_bandwidth_gb_per_s.value * scale)
    assert all(f.source.startswith("fit: ") for f in fitted.collectives.intra_node_fits)
    ladder = result.all_rows[result.all_rows["schedule"] == "ladder"]
    assert ladder["rel_error"].abs().max() < 0.005


def test_fit_with_ladder_rows_recovers_the_interference_fractions(tmp_path, h100):
    # Rows made by a machine whose overlap costs more than the base profile says (the shipped
    # fractions are estimates): ladder rows carry the overlap, so with them the fit sets both
    # fractions, and standard-only rows leave them alone.
    truth_spec = h100.interference.model_copy(update={
        "compute_slowdown": Sourced(value=0.3, source="test truth"),
        "comm_slowdown": Sourced(value=3.0, source="test truth")})
    truth = _perturbed(h100, step_overhead_us=400.0).model_copy(
        update={"interference": truth_spec})
    measured = _tiny_measured(tmp_path, truth, schedules=("standard", "ladder"))
    result = fit_profiles(measured, {"on": h100}, ValidationSetup(), schedules=("standard", "ladder"), priors=False)
    p = result.parameters
    assert p["compute_slowdown"] == pytest.approx(0.3, abs=0.02)
    assert p["comm_slowdown"] == pytest.approx(3.0, rel=0.1)
    fitted = result.profiles["on"].interference
    assert fitted.comm_slowdown_part == "bandwidth" and fitted.by_size == []
    assert fitted.collective_channels == h100.interference.collective_channels  # the channel rule is kept
    assert fitted.compute_slowdown.source.startswith("fit: ")
    assert result.all_rows["rel_error"].abs().max() < 0.005
    assert "interference" not in result.profiles["on"].provenance["fit_kept"]
    standard_only = fit_profiles(measured, {"on": h100}, ValidationSetup(), schedules=("standard",), priors=False)
    assert "compute_slowdown" not in standard_only.parameters


def test_fit_cli_with_ladder_writes_fitted_interference(tmp_path, capsys, h100):
    truth = h100.model_copy(update={"interference": h100.interference.model_copy(update={
        "compute_slowdown": Sourced(value=0.2, source="test truth")})})
    measured = _tiny_measured(tmp_path, truth, schedules=("standard", "ladder"))
    csv = tmp_path / "measured.csv"
    measured.to_csv(csv, index=False)
    out = tmp_path / "fitted.yaml"
    assert main(["fit", str(csv), "--hardware", "h100-sxm-nvswitch", "--with-ladder", "--out", str(out),
                 "--report", str(tmp_path / "report")]) == 0
    assert "compute_slowdown = 0.2" in capsys.readouterr().out
    assert load_profile(out).interference.compute_slowdown.source.startswith("fit: ")
    report = (tmp_path / "report" / "index.md").read_text()
    assert "Fitted on the `standard`, `ladder` rows; no row is held out." in report
    assert "| compute_slowdown | 0.2 |" in report


def test_fit_cli_says_when_the_fit_predicts_held_out_speedups_worse_than_the_base(tmp_path, capsys, h100):
    """Standard rows from a machine with a 400 us slower step, ladder rows from the base profile
    itself: the fit takes the 400 us (it is never worse on its own rows) and so predicts ladder's
    speedups worse than the base does; fit prints both and warns in one line. On rows the base
    profile predicts exactly, the fit changes nothing and says nothing of it."""
    slow = validate(_tiny_measured(tmp_path, h100, schedules=("standard",)),
                    ValidationSetup(hardware=_perturbed(h100, step_overhead_us=400.0)))
    measured = _tiny_measured(tmp_path, h100, schedules=("standard", "ladder"))
    standard = measured["schedule"] == "standard"
    measured.loc[standard, "tokens_per_s"] = slow["predicted_tokens_per_s"].to_numpy()
    for name, frame in (("mixed", measured), ("base", _tiny_measured(tmp_path, h100, schedules=("standard", "ladder")))):
        csv = tmp_path / f"{name}.csv"
        frame.to_csv(csv, index=False)
        assert main(["fit", str(csv), "--hardware", "h100-sxm-nvswitch", "--out", str(tmp_path / f"{name}.yaml"),
                     "--report", str(tmp_path / f"report-{name}")]) == 0
        out, err = capsys.readouterr()
        assert "fitted and base profile (no fit)" in out
        warning = [line for line in err.splitlines() if "worse than the base" in line]
        if name == "mixed":
            assert len(warning) == 1 and warning[0].startswith("fit: warning: ")
            table = out.split("fitted and base profile (no fit):")[1].splitlines()
            header, row = table[1].split(), table[2].split()
            values = dict(zip(header, row))
            assert float(values["worst_pp"]) > float(values["base_worst_pp"]) + 1.0
        else:
            assert warning == []


def test_an_interrupted_fit_says_nothing_was_written(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("laddersim.fitting.rows.fit_profiles", interrupted)
    out = tmp_path / "x.yaml"
    assert main(["fit", str(BUILTIN_MEASURED), "--hardware", "h100-sxm-nvswitch", "--out", str(out)]) == 130
    assert capsys.readouterr().err.endswith("interrupted: nothing written (a fit keeps no partial state); "
                                            "re-run the same command to fit again\n")
    assert not out.exists()


def test_an_interrupted_validate_does_not_promise_a_resume(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("laddersim.validation.core.validate", interrupted)
    assert main(["validate"]) == 130
    assert capsys.readouterr().err == "interrupted: stopped before it finished; re-run the same command\n"


def test_validate_draws_pipeline_rows_beside_single_stage_ones(tmp_path, h100):
    # One setting at PP 1 and PP 2 (same TP, batch, schedule) is two panels, not one clash.
    tiny = _tiny_measured(tmp_path, h100, schedules=("standard", "ladder"))
    tiny = tiny[tiny["tp"] < 8]  # TP 8 x PP 2 would take two nodes
    frame = pd.concat([tiny.assign(pp=1), tiny.assign(pp=2)], ignore_index=True)
    csv = tmp_path / "measured.csv"
    frame.to_csv(csv, index=False)
    out = tmp_path / "report"
    assert main(["validate", str(csv), "--report", str(out)]) == 0
    result = pd.read_csv(out / "validation.csv")
    assert sorted(result["pp"].unique()) == [1, 2]
    assert (out / "tokens_per_s_vs_tp.png").stat().st_size > 0
