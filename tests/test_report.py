"""``laddersim report``: one command writes index.md with six sections, working relative figure
links, the commands to reproduce, and nothing machine- or time-dependent in the Markdown."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.image import imread

from laddersim.cli import main
from laddersim.reporting.bandwidth_section import speedup_pivot
from laddersim.reporting.paper_section import speedup_table, validate_by_setting
from laddersim.reporting.planning_section import planning_section
from laddersim.reporting.timeline_section import timeline_section
from laddersim.validation import read_measured


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str, str]:
    """The report written once through the CLI (quick mode): (directory, stdout, stderr)."""
    out_dir = tmp_path_factory.mktemp("report")
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["report", "--out", str(out_dir), "--quick", "--no-progress"])
    assert code == 0
    return out_dir, stdout.getvalue(), stderr.getvalue()


def test_report_writes_index_with_nine_sections_and_progress(report):
    out_dir, stdout, stderr = report
    index = out_dir / "index.md"
    assert stdout.strip() == str(index)
    text = index.read_text()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert [h.split(".")[0] for h in headings] == ["1", "2", "3", "4", "5", "6", "7", "8", "9"]
    assert "Paper reproduction" in headings[0] and "interconnect" in headings[1]
    assert "decode step" in headings[2] and "Planning" in headings[3]
    assert "Multi-node" in headings[4] and "Serving" in headings[5] and "TP x PP" in headings[6]
    assert "custom all-reduce" in headings[7] and "MoE model" in headings[8]
    for i in range(1, 10):
        assert f"report: [{i}/9]" in stderr
    # The page records what made it: the laddersim version and a hash of each shipped profile.
    from laddersim.hardware import load_profile
    from laddersim.support.provenance import laddersim_version, profile_sha256

    assert f"Made by laddersim {laddersim_version()}" in text
    assert f"`h100-sxm-p2p-off` {profile_sha256(load_profile('h100-sxm-p2p-off'))[:16]}" in text
    # Every section says how to read it and how to reproduce it.
    assert text.count("**How to read this.**") == 9
    assert text.count("```bash") >= 5


def test_report_links_resolve_to_real_figures(report):
    out_dir, _, _ = report
    text = (out_dir / "index.md").read_text()
    links = re.findall(r"\]\(((?:figures)/[^)]+)\)", text)
    pngs = [link for link in links if link.endswith(".png")]
    assert len(pngs) == 7  # paper figure, bandwidth what-if, timeline, breakdown, heatmap, serving CDFs, goodput
    for link in links:
        path = out_dir / link
        assert path.is_file() and path.stat().st_size > 1000, link
    for link in pngs:
        assert imread(out_dir / link).std() > 0.01  # not a blank image
    # Table of contents anchors point at real headings.
    anchors = re.findall(r"\(#([^)]+)\)", text)
    heading_anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                       for h in re.findall(r"^## (.+)$", text, flags=re.M)}
    assert anchors and set(anchors) <= heading_anchors


def test_report_markdown_has_no_timings_or_absolute_paths(report):
    out_dir, _, _ = report
    text = (out_dir / "index.md").read_text()
    assert str(out_dir) not in text.replace(f"--out {out_dir}", "")
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)  # no dates
    assert "laddersim report --quick --out" in text  # the command that made this page


def test_sections_are_byte_identical_when_rerun(report, tmp_path):
    out_dir, _, _ = report
    again = timeline_section(tmp_path, tmp_path / "figures")
    assert again.figures
    for path in again.figures:
        assert path.read_bytes() == (out_dir / "figures" / path.name).read_bytes()
    first = (out_dir / "index.md").read_text()
    assert again.body in first
    assert planning_section(tmp_path, tmp_path / "figures").body in first


def test_paper_section_keeps_settings_that_run_and_lists_the_rest():
    measured = read_measured()
    runs = measured[(measured.p2p == "on") & (measured.tp == 8) & (measured.batch == 1)]
    # 70B does not fit one GPU at batch 64: that setting is skipped with the simulator's reason.
    no_fit = runs.assign(tp=1, batch=64)
    frame, skipped = validate_by_setting(pd.concat([runs, no_fit], ignore_index=True))
    assert len(frame) == len(runs)
    assert [name for name, _ in skipped] == ["P2P on, TP 1, batch 64"]
    assert skipped[0][1].startswith("memory:")
    table = speedup_table(frame)
    assert len(table) == 1
    ladder = frame[frame.schedule == "ladder"].iloc[0]
    assert table["speedup measured"].iloc[0] == pytest.approx(ladder.measured_speedup)
    assert table["speedup predicted"].iloc[0] == pytest.approx(ladder.predicted_speedup)
    # The measured headline of the paper: 1.31x at TP 8, batch 1, P2P on.
    assert table["speedup measured"].iloc[0] == pytest.approx(101.2 / 77.4, rel=1e-3)


def test_bandwidth_pivot_reads_speedups_per_scale():
    frame = pd.DataFrame({
        "model": "m", "tp": 8, "batch": 1, "schedule": ["standard", "ladder"] * 2, "status": "ok",
        "intra_bandwidth_scale": [0.5, 0.5, 1.0, 1.0], "speedup_vs_standard": [1.0, 1.4, 1.0, 1.2],
    })
    pivot = speedup_pivot(frame)
    assert list(pivot.columns) == ["model", "tp", "batch", "0.5x bw", "1x bw"]
    assert pivot.iloc[0][["0.5x bw", "1x bw"]].tolist() == [1.4, 1.2]


def test_committed_reports_were_made_with_the_shipped_profiles_as_they_are():
    """The reports in the repository name, per profile, the hash of the values and tables that
    made them: every hash still matches the shipped profile (a profile or schema change without
    regenerating the reports fails here, naming the report to regenerate)."""
    from laddersim.hardware import load_profile
    from laddersim.support.provenance import profile_sha256

    repo = Path(__file__).resolve().parents[1]
    current: dict[str, str] = {}
    checked = 0
    for name in ("reports/index.md", "reports/validation/index.md", "reports/fit/index.md"):
        line = next(x for x in (repo / name).read_text().splitlines() if "profiles used (SHA-256" in x)
        pairs = re.findall(r"`([a-z0-9-]+)` ([0-9a-f]{16})", line)
        assert pairs, name
        for profile, digest in pairs:
            if profile not in current:
                current[profile] = profile_sha256(load_profile(profile))[:16]
            assert digest == current[profile], f"{name} is stale for {profile}: regenerate it (its Reproduce line)"
            checked += 1
    assert checked >= 3
