"""Plots: every kind renders a real, deterministic PNG + SVG from a small table built with
simulate(); the numbers drawn are the table's; bad tables and flags are one-line errors."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from laddersim.cli import main
from laddersim.errors import UserInputError
from laddersim.hardware.overrides import with_overrides
from laddersim.plots import PLOT_KINDS, plot_bandwidth, plot_heatmap, plot_timeline
from laddersim.plots.frames import parse_where, select, with_speedup
from laddersim.plots.timeline import exposed_comm_s
from laddersim.simulation.simulate import make_scenario, simulate

TABLE_KINDS = [k for k, v in PLOT_KINDS.items() if v.input == "results"]
SCHEDULES = ("standard", "ladder", "parallel")


@pytest.fixture(scope="module")
def table(h100, tiny_model) -> pd.DataFrame:
    """A results table shaped like ``laddersim sweep`` output: inputs, overrides, status, metrics."""
    rows = []
    for tp in (2, 4):
        for batch in (1, 4):
            for bw_scale in (0.5, 1.0, 2.0):
                for lat_scale in (1.0, 4.0):
                    hw = with_overrides(h100, intra_bandwidth_scale=bw_scale, intra_latency_scale=lat_scale)
                    for schedule in SCHEDULES:
                        summary = simulate(make_scenario(model=tiny_model, hardware=hw, tp=tp, batch=batch,
                                                         prompt_len=64, gen_len=8, schedule=schedule)).summary()
                        summary.update(hardware=h100.name, intra_bandwidth_scale=bw_scale,
                                       intra_latency_scale=lat_scale, status="ok", error=None)
                        rows.append(summary)
    # A point that did not fit: inputs and status only, as the sweep writes it.
    rows.append({"model": "tiny", "hardware": h100.name, "tp": 1, "batch": 4, "prompt_len": 64, "gen_len": 8,
                 "schedule": "ladder", "dtype": "bfloat16", "kv_cache": "static", "intra_bandwidth_scale": 1.0,
                 "intra_latency_scale": 1.0, "status": "infeasible", "error": "does not fit"})
    return with_speedup(pd.DataFrame(rows))


@pytest.fixture(scope="module")
def base_point(table) -> pd.DataFrame:
    return select(table, {"intra_bandwidth_scale": "1.0", "intra_latency_scale": "1.0"})


def _frame_for(kind: str, table: pd.DataFrame, base_point: pd.DataFrame) -> pd.DataFrame:
    if kind == "bandwidth":
        return select(table, {"intra_latency_scale": "1.0"})
    if kind == "latency":
        return select(table, {"intra_bandwidth_scale": "1.0"})
    return base_point


def _svg_texts(path) -> list[str]:
    """Text of the SVG (text is drawn as paths; matplotlib keeps each string as a comment)."""
    return re.findall(r"<!-- (.*?) -->", path.read_text())


def assert_real_image(paths) -> None:
    png, svg = paths
    assert (png.suffix, svg.suffix) == (".png", ".svg")
    pixels = imread(png)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 200
    # Not blank: a drawn figure has many distinct colours.
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 20
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert len(root.findall(".//{http://www.w3.org/2000/svg}path")) > 20


@pytest.mark.parametrize("kind", TABLE_KINDS)
def test_every_table_kind_renders_deterministic_png_and_svg(kind, table, base_point, tmp_path):
    frame = _frame_for(kind, table, base_point)
    first = PLOT_KINDS[kind].function(frame, tmp_path / "a" / kind)
    assert_real_image(first)
    second = PLOT_KINDS[kind].function(frame, tmp_path / "b" / kind)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_speedup_is_tokens_over_standard_tokens(table):
    derived = with_speedup(table.drop(columns="speedup_vs_standard"))
    ok = derived[derived["status"] == "ok"]
    for _, row in ok.sample(10, random_state=0).iterrows():
        same = ok[(ok.tp == row.tp) & (ok.batch == row.batch) & (ok.schedule == "standard")
                  & (ok.intra_bandwidth_scale == row.intra_bandwidth_scale)
                  & (ok.intra_latency_scale == row.intra_latency_scale)]
        assert len(same) == 1
        assert row.speedup_vs_standard == pytest.approx(row.tokens_per_s / same.tokens_per_s.iloc[0], rel=1e-12)
    assert (ok[ok.schedule == "standard"].speedup_vs_standard == 1.0).all()
    assert derived.loc[derived.status != "ok", "speedup_vs_standard"].isna().all()


def test_heatmap_cells_are_the_table_speedups_and_mark_infeasible(base_point, tmp_path):
    _, svg = plot_heatmap(base_point, tmp_path / "heat")
    texts = _svg_texts(svg)
    ladder = base_point[(base_point.schedule == "ladder") & (base_point.status == "ok")]
    assert len(ladder) == 4
    for value in ladder["speedup_vs_standard"]:
        assert f"{value:.2f}" in texts
    assert "no fit" in texts  # the infeasible TP 1 x batch 4 cell
    assert "TP degree (GPUs)" in texts and "batch size (sequences)" in texts


def test_bandwidth_plot_has_a_line_per_tp_and_batch_and_labelled_axes(table, tmp_path):
    _, svg = plot_bandwidth(select(table, {"intra_latency_scale": "1.0"}), tmp_path / "bw")
    texts = _svg_texts(svg)
    for label in ("TP 2, batch 1", "TP 2, batch 4", "TP 4, batch 1", "TP 4, batch 4"):
        assert label in texts
    assert "intra-node bandwidth (x the profile's)" in texts
    assert "ladder speedup" in texts and "over standard (x)" in texts


def test_bandwidth_plot_x_defaults_to_the_column_that_varies(table, tmp_path):
    _, svg = plot_bandwidth(select(table, {"intra_bandwidth_scale": "1.0"}).assign(intra_bandwidth_scale=1.0),
                            tmp_path / "lat", x=None)
    # Only latency varies here: the bandwidth kind has no bandwidth axis to draw against, so it
    # falls back to the first bandwidth column present, whose single value still plots.
    assert "intra-node bandwidth (x the profile's)" in _svg_texts(svg)


def test_timeline_shows_ladder_hiding_the_allreduce(h100, tiny_model, tmp_path):
    frames, exposed = [], {}
    for schedule in ("standard", "ladder"):
        result = simulate(make_scenario(model=tiny_model, hardware=h100, tp=4, batch=1, prompt_len=64, gen_len=8,
                                        schedule=schedule))
        spans = result.timeline([2], ranks=[0, 1])
        # The figure's exposed-communication number is the simulator's own for that step.
        assert exposed_comm_s(spans[spans["rank"] == 0]) == pytest.approx(result.decode_metrics[2, 4], rel=1e-9, abs=1e-12)
        exposed[schedule] = exposed_comm_s(spans[spans["rank"] == 0])
        frames.append(spans.assign(schedule=schedule))
    assert exposed["ladder"] < 0.5 * exposed["standard"]
    paths = plot_timeline(pd.concat(frames, ignore_index=True), tmp_path / "tl", zoom_layers=1)
    assert_real_image(paths)
    texts = _svg_texts(paths[1])
    assert "rank 1 comm" in texts and "time since step start (ms)" in texts
    assert any(t.startswith("ladder: step") for t in texts)


@pytest.mark.parametrize("call, message", [
    (lambda t, out: plot_heatmap(t.drop(columns="tp"), out), "needs column(s) tp"),
    (lambda t, out: plot_heatmap(t, out, schedule="hybrid:2"), "schedule: no 'hybrid:2' rows"),
    (lambda t, out: plot_bandwidth(t, out, x="nope"), "x: no column 'nope'"),
    (lambda t, out: plot_heatmap(t.assign(status="error"), out), "no rows with status ok"),
    (lambda t, out: plot_timeline(t, out), "timeline: spans need column(s)"),
])
def test_bad_tables_raise_user_input_errors(call, message, table, tmp_path):
    with pytest.raises(UserInputError, match=re.escape(message)):
        call(table, tmp_path / "x")


def test_too_many_panels_asks_for_where(h100, tmp_path):
    frame = pd.DataFrame({"model": [f"m{i}" for i in range(13) for _ in range(2)],
                          "tp": 2, "batch": 1, "schedule": ["standard", "ladder"] * 13,
                          "tokens_per_s": [1.0, 1.2] * 13})
    with pytest.raises(UserInputError, match="--where"):
        plot_heatmap(frame, tmp_path / "h")


# ---- command line ----------------------------------------------------------------------------

@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_cli_plots_a_results_file(ext, table, tmp_path, capsys):
    path = tmp_path / f"results.{ext}"
    table.to_csv(path, index=False) if ext == "csv" else table.to_parquet(path, index=False)
    code = main(["plot", str(path), "--kind", "heatmap", "--where", "intra_bandwidth_scale=1",
                 "--where", "intra_latency_scale=1"])
    assert code == 0
    written = capsys.readouterr().out.split()
    assert written == [str(tmp_path / "results-heatmap.png"), str(tmp_path / "results-heatmap.svg")]
    assert_real_image([tmp_path / "results-heatmap.png", tmp_path / "results-heatmap.svg"])


def test_cli_timeline_from_scenario_flags(tmp_path, capsys):
    out = tmp_path / "tl"
    code = main(["plot", "--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch",
                 "--tp", "2", "--prompt-len", "64", "--gen-len", "4", "--step", "1", "--out", str(out)])
    assert code == 0
    assert capsys.readouterr().out.split() == [str(out) + ".png", str(out) + ".svg"]
    texts = _svg_texts(out.with_suffix(".svg"))
    assert any(t.startswith("standard: step") for t in texts) and any(t.startswith("ladder: step") for t in texts)



def test_cli_timeline_takes_the_expert_layout(tmp_path, capsys):
    """--ep and --dp-attention reach the drawn step as simulate's: the spans are that scenario's own
    step, and the expert-parallel step differs from the TP-only one."""
    from laddersim.plots.step_spans import decode_step_spans
    from laddersim.simulation.simulate import make_scenario, simulate

    common = dict(model="mixtral-8x7b", hardware="h100-sxm-nvswitch", tp=2, batch=4, prompt_len=64, gen_len=4)
    tp_only, _ = decode_step_spans(**common, schedules=["ladder"], step=1, n_ranks=2)
    with_ep, results = decode_step_spans(**common, schedules=["ladder"], step=1, n_ranks=2, ep=2)
    own = simulate(make_scenario(**common, ep=2, schedule="ladder")).timeline([1], ranks=[0, 1])
    assert with_ep.drop(columns="schedule").equals(own)
    assert not with_ep.drop(columns="schedule").equals(tp_only.drop(columns="schedule"))
    out = tmp_path / "ep"
    assert main(["plot", "--kind", "timeline", "--model", "mixtral-8x7b", "--hardware", "h100-sxm-nvswitch", "--tp",
                 "1", "--ep", "4", "--dp-attention", "--prompt-len", "64", "--gen-len", "4", "--out", str(out)]) == 0
    assert capsys.readouterr().out.split() == [str(out) + ".png", str(out) + ".svg"]
    assert main(["plot", "--kind", "timeline", "--model", "mixtral-8x7b", "--hardware", "h100-sxm-nvswitch", "--tp",
                 "2", "--ep", "3", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: ep: 3 does not divide the 8 experts of mistralai--Mixtral-8x7B-v0.1; allowed: 1, 2, 4, 8"]

@pytest.mark.parametrize("argv, message", [
    (["--kind", "heatmap"], "error: results: --kind heatmap needs a RESULTS table"),
    (["{csv}", "--kind", "throughput", "--schedule", "ladder"], "error: schedule: not used by --kind throughput"),
    (["{csv}", "--kind", "heatmap", "--where", "tp"], "error: where: 'tp' is not COLUMN=VALUE"),
    (["{csv}", "--kind", "heatmap", "--where", "colour=red"], "error: where: no column 'colour'"),
    (["{csv}", "--kind", "heatmap", "--model", "llama-3.1-8b"], "error: model: scenario flags are for --kind timeline"),
    (["{dir}/r.txt", "--kind", "heatmap"], "error: results: '{dir}/r.txt' has extension '.txt'; allowed: .parquet, .csv"),
    (["--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch"],
     "error: tp: --kind timeline needs --tp"),
    (["--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
      "--gen-len", "4", "--step", "3"], "error: step: 3 is not a decode step; allowed: 0..2"),
    (["--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
      "--ranks", "3"], "error: ranks: 3 is more than tp=2"),
    (["--kind", "nope"], "error: plot: argument --kind: invalid choice"),
    # --x takes numeric inputs only: text columns cannot be ordered, results are the y axis.
    (["{csv}", "--kind", "bandwidth", "--x", "model"],
     "error: x: 'model' is not a numeric input column to plot against; allowed: tp, batch, prompt_len, gen_len, "
     "intra_bandwidth_scale, intra_latency_scale"),
    (["{csv}", "--kind", "bandwidth", "--x", "tokens_per_s"], "error: x: 'tokens_per_s' is not a numeric input"),
    (["{csv}", "--kind", "latency", "--x", "speedup_vs_standard"], "error: x: 'speedup_vs_standard' is not"),
    (["--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
      "--gen-len", "1"], "error: gen-len: 1 gives no decode step to draw (the prefill makes the first token); "
                         "allowed: gen-len >= 2"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, message, table, tmp_path, capsys):
    csv = tmp_path / "r.csv"
    table.to_csv(csv, index=False)
    argv = [a.format(csv=csv, dir=tmp_path) for a in argv]
    try:
        code = main(["plot", *argv])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(message.format(dir=tmp_path)) and err.count("\n") == 1


def test_x_may_be_a_numeric_input_such_as_tp(table, tmp_path):
    frame = select(table, {"intra_bandwidth_scale": "1.0", "intra_latency_scale": "1.0"})
    _, svg = plot_bandwidth(frame, tmp_path / "by-tp", x="tp")
    texts = _svg_texts(svg)
    assert "TP degree (GPUs)" in texts and "Speedup vs TP degree (GPUs)" in "\n".join(texts)
    assert "batch 1" in texts and "batch 4" in texts


def test_repeated_where_on_one_column_means_any_of_its_values(table, tmp_path, capsys):
    assert parse_where(["tp=4", "tp=2", "batch=1", "tp=4"]) == {"tp": ["4", "2"], "batch": ["1"]}
    chosen = select(table, parse_where(["tp=4", "tp=2", "batch=1"]))
    assert set(chosen["tp"]) == {2, 4} and set(chosen["batch"]) == {1}
    assert set(select(table, {"tp": "2"})["tp"]) == {2}  # a single value still works
    csv = tmp_path / "r.csv"
    table.to_csv(csv, index=False)
    out = tmp_path / "heat"
    assert main(["plot", str(csv), "--kind", "heatmap", "--where", "tp=2", "--where", "tp=4",
                 "--where", "intra_bandwidth_scale=1", "--where", "intra_latency_scale=1", "--out", str(out)]) == 0
    texts = _svg_texts(out.with_suffix(".svg"))
    base = select(table, {"intra_bandwidth_scale": "1", "intra_latency_scale": "1", "schedule": "ladder",
                          "status": "ok"})
    for tp in (2, 4):
        for value in base[base.tp == tp]["speedup_vs_standard"]:
            assert f"{value:.2f}" in texts


def test_timeline_ranks_default_shrinks_to_tp(tmp_path, capsys):
    out = tmp_path / "tp1"
    code = main(["plot", "--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch",
                 "--tp", "1", "--prompt-len", "64", "--gen-len", "3", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    texts = _svg_texts(out.with_suffix(".svg"))
    assert "rank 0 compute" in texts and "rank 1 compute" not in texts


def test_timeline_zoom_label_is_clamped_to_the_model_layers(h100, tiny_model, tmp_path):
    spans = simulate(make_scenario(model=tiny_model, hardware=h100, tp=2, batch=1, prompt_len=64, gen_len=4,
                                   schedule="ladder")).timeline([0], ranks=[0, 1])
    _, svg = plot_timeline(spans.assign(schedule="ladder"), tmp_path / "zoom", zoom_layers=9)
    texts = _svg_texts(svg)
    assert f"zoom: layers 0-{tiny_model.n_layers - 1}" in texts and "zoom: layers 0-8" not in texts


def test_panel_titles_wrap_between_parts(table, tmp_path):
    from laddersim.plots.frames import panel_title

    values = {"batch": 1, "intra_bandwidth_scale": 0.5, "intra_latency_scale": 4.0}
    assert panel_title(values, 10.0) == "batch 1, intra-node bandwidth 0.5x, intra-node latency 4x"
    assert panel_title(values, 3.0) == "batch 1\nintra-node bandwidth 0.5x\nintra-node latency 4x"
    # A part longer than the panel is wide: its name above its value, not into the next title.
    assert panel_title({"intra_bandwidth_gbps": 100.0}, 2.4) == "intra-node bandwidth\n100 GB/s"


# ---- what a reader sees: words, values, legends off the curves, marked gaps -------------------

def _figure_of(monkeypatch, module):
    """Call a plot function and keep its matplotlib figure (saved as usual) for inspection."""
    import importlib

    target = importlib.import_module(f"laddersim.plots.{module}")
    kept = []
    real = target.save_figure

    def keep(fig, out_base):
        kept.append(fig)
        return real(fig, out_base)

    monkeypatch.setattr(target, "save_figure", keep)
    return kept


def _set_bandwidth_table(table: pd.DataFrame) -> pd.DataFrame:
    """The bandwidth sweep as set values in GB/s (50 .. 900), the way examples/sweep_bandwidth.yaml
    writes them, from the fixture's scales."""
    frame = select(table, {"intra_latency_scale": "1.0"}).drop(columns=["intra_latency_scale"])
    gbps = {0.5: 50.0, 1.0: 225.0, 2.0: 900.0}
    return frame.assign(intra_bandwidth_gbps=frame["intra_bandwidth_scale"].map(gbps)).drop(
        columns=["intra_bandwidth_scale"])


def test_bandwidth_ticks_are_the_set_values_and_the_legend_is_off_the_curves(table, tmp_path, monkeypatch):
    kept = _figure_of(monkeypatch, "link_speedup")
    _, svg = plot_bandwidth(_set_bandwidth_table(table), tmp_path / "gbps")
    texts = _svg_texts(svg)
    for value in ("50", "225", "900"):
        assert value in texts  # the GB/s the sweep set, not powers of two
    assert not any("2^{" in t for t in texts)
    fig = kept[0]
    assert all(ax.get_legend() is None for ax in fig.axes)  # no legend drawn over a panel
    assert len(fig.legends) == 1
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"TP 2, batch 1", "TP 2, batch 4", "TP 4, batch 1",
                                                                   "TP 4, batch 4"}
    # TP is the dash pattern, batch the colour: lines of one batch share a colour.
    lines = {line.get_label(): line for line in fig.axes[0].get_lines() if line.get_label().startswith("TP")}
    assert lines["TP 2, batch 1"].get_color() == lines["TP 4, batch 1"].get_color()
    assert lines["TP 2, batch 1"].get_linestyle() != lines["TP 4, batch 1"].get_linestyle()
    # A scale axis reads 0.5, 1, 2.
    _, svg = plot_bandwidth(select(table, {"intra_latency_scale": "1.0"}), tmp_path / "scale")
    assert {"0.5", "1", "2"} <= set(_svg_texts(svg))


def test_panel_titles_are_words_with_units(table, tmp_path):
    frame = _set_bandwidth_table(table)
    _, svg = PLOT_KINDS["throughput"].function(frame[frame["batch"] == 1], tmp_path / "tp")
    texts = _svg_texts(svg)
    assert {"intra-node bandwidth 50 GB/s", "intra-node bandwidth 225 GB/s", "intra-node bandwidth 900 GB/s"} \
        <= set(texts)
    assert not any("=" in t for t in texts)  # no raw column=value titles


def test_throughput_speedup_labels_are_level_and_readable(table, base_point, tmp_path, monkeypatch):
    kept = _figure_of(monkeypatch, "throughput")
    PLOT_KINDS["throughput"].function(base_point, tmp_path / "tp")
    labels = [t for ax in kept[0].axes for t in ax.texts if t.get_text().endswith("x")]
    ok = base_point[(base_point.status == "ok") & (base_point.schedule != "standard")]
    assert sorted(t.get_text() for t in labels) == sorted(f"{v:.2f}x" for v in ok.speedup_vs_standard)
    assert all(t.get_rotation() == 0 and t.get_fontsize() >= 8 for t in labels)


def test_throughput_panels_share_one_y_scale(base_point, tmp_path, monkeypatch):
    # Batch 1 and batch 4 panels: tokens/s differ by ~4x; one scale lets bars compare across panels.
    kept = _figure_of(monkeypatch, "throughput")
    PLOT_KINDS["throughput"].function(base_point, tmp_path / "tp")
    axes = [ax for ax in kept[0].axes if ax.get_visible() and ax.patches]
    assert len(axes) == 2
    tops = [max(bar.get_height() for bar in ax.patches) for ax in axes]
    assert max(tops) > 2 * min(tops)  # the panels really differ in scale
    assert axes[0].get_ylim() == axes[1].get_ylim() and axes[0].get_ylim()[1] >= max(tops)
    assert [bool(ax.get_ylabel()) for ax in axes] == [True, False]  # labelled once, on the left


def test_bandwidth_axis_is_numeric_at_the_swept_values(table, tmp_path, monkeypatch):
    kept = _figure_of(monkeypatch, "link_speedup")
    PLOT_KINDS["bandwidth"].function(select(table, {"intra_latency_scale": "1.0"}), tmp_path / "bw")
    ax = kept[0].axes[0]
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]  # not the 1x guides
    assert lines and all(sorted(map(float, line.get_xdata())) == [0.5, 1.0, 2.0] for line in lines)
    assert list(ax.get_xticks()) == [0.5, 1.0, 2.0]  # placed at the values (a numeric axis), not 0, 1, 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5", "1", "2"]


@pytest.mark.parametrize("kind", ["breakdown", "throughput"])
def test_configurations_that_did_not_run_are_marked(kind, base_point, tmp_path):
    oom = {**base_point[base_point.status != "ok"].iloc[0].to_dict(), "tp": 1, "batch": 1, "schedule": "standard",
           "error": "memory: tiny at tp=1 needs 90 GiB per GPU but h100-sxm-nvswitch has 71.7 GiB usable"}
    frame = pd.concat([base_point, pd.DataFrame([oom])], ignore_index=True)
    _, svg = PLOT_KINDS[kind].function(frame, tmp_path / kind)
    texts = _svg_texts(svg)
    assert texts.count("out of memory") == 1  # TP 1 standard at batch 1: its place is marked
    assert texts.count("not run") == 1  # TP 1 ladder at batch 4 ("does not fit", no memory figure)


def test_latency_cdf_legend_is_below_the_panels(tmp_path, monkeypatch):
    from laddersim.plots.serving import plot_latency_cdfs

    kept = _figure_of(monkeypatch, "serving")
    rng = np.random.default_rng(0)
    requests = pd.DataFrame({"schedule": ["standard"] * 50 + ["ladder"] * 50, "ttft_s": rng.uniform(0.05, 0.2, 100),
                             "tpot_s": rng.uniform(0.01, 0.03, 100), "e2e_s": rng.uniform(1, 5, 100)})
    plot_latency_cdfs(requests, tmp_path / "cdf", ttft_slo_s=0.5, tpot_slo_s=0.03)
    fig = kept[0]
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["standard", "ladder", "SLO"]


def test_many_series_get_a_compact_legend_not_one_entry_each(table, tmp_path, monkeypatch):
    """Issue 38: ``plot --x tp`` over a sweep of batches and link scales drew one legend entry per
    line below a single panel, mostly legend. Past 8 lines the legend names each colour and each
    dash pattern once (12 lines: 6 colours + 2 dashes), every line still its own style, in at most
    three rows; a single key with many values, one entry per line in three rows."""
    kept = _figure_of(monkeypatch, "link_speedup")
    plot_bandwidth(table, tmp_path / "by-tp", x="tp")
    fig = kept[-1]
    lines = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("batch")]
    assert len(lines) == 12  # batch x bandwidth scale x latency scale
    assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == 12
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(names) == 8 and {"batch 1", "batch 4"} <= set(names)
    assert all(not name.startswith("batch") for name in names[:6])  # the colours: bandwidth x latency
    # One key with 12 values: beside the panel, one column of up to 12 entries.
    one_key = pd.concat([table[table["batch"] == 1].assign(batch=b) for b in range(1, 13)], ignore_index=True)
    plot_bandwidth(select(one_key, {"intra_latency_scale": "1.0", "intra_bandwidth_scale": "1.0"}),
                   tmp_path / "twelve", x="tp")
    for fig, entries in ((kept[-2], 8), (kept[-1], 12)):
        legend = fig.legends[0]
        fig.canvas.draw()
        box, panel = legend.get_window_extent(), fig.axes[0].get_window_extent()
        assert len(legend.get_texts()) == entries and box.y1 <= panel.y0  # below the panel
        rows = {round(t.get_window_extent().y0) for t in legend.get_texts()}
        assert len(rows) <= 3 and box.height < panel.height / 2  # three rows: the panel keeps the figure
