"""Every development group's errors: computed per table x model x P2P x framework from validated
rows, committed as a compact table with the command that wrote it, quoted by the report and stated
by the README, the same table in both; and reproduced from the development tables shipped in
laddersim/data/validation by ``laddersim validate`` with no table."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import pandas as pd
import pytest

from laddersim.validation.development_groups import (
    DEVELOPMENT_TABLES, README_END, README_START, development_table_paths, group_errors, groups_csv, groups_markdown,
    read_development_tables, read_groups, with_readme_table)

ROOT = Path(__file__).resolve().parents[1]


def _validated() -> pd.DataFrame:
    """Two groups as ``validate`` returns them: tokens/s errors, speedup errors, prefill times."""
    return pd.DataFrame({
        "model": ["m", "m", "m", "m", "m"], "p2p": ["on", "on", "on", "off", "off"],
        "framework": [None, None, None, "eager", "eager"],
        "schedule": ["standard", "ladder", "parallel", "standard", "ladder"],
        "rel_error": [0.10, -0.02, 0.04, -0.50, 0.30],
        "speedup_error_pp": [0.0, -3.0, 1.0, 0.0, 7.0],
        "prefill_s": [1.0, 1.0, None, 2.0, 2.0], "predicted_prefill_s": [1.1, 0.8, 0.5, 1.0, 3.0]})


def test_group_errors_by_hand():
    groups = group_errors(_validated(), "t.csv", "gpt-fast").set_index("framework")
    on = groups.loc["gpt-fast"]  # rows without a framework are the setup's
    assert (on["table"], on["model"], on["p2p"], on["rows"]) == ("t.csv", "m", "on", 3)
    assert on["tokens_per_s_median_abs_err_pct"] == pytest.approx(4.0)  # |10|, |-2|, |4|
    assert on["tokens_per_s_worst_abs_err_pct"] == pytest.approx(10.0)
    assert on["speedup_median_abs_err_pp"] == pytest.approx(2.0)  # ladder 3, parallel 1 (standard not counted)
    assert on["speedup_worst_abs_err_pp"] == pytest.approx(3.0)
    assert on["prefill_rows"] == 2 and on["prefill_median_abs_err_pct"] == pytest.approx(15.0)  # 10, 20
    off = groups.loc["eager"]
    assert off["tokens_per_s_median_abs_err_pct"] == pytest.approx(40.0) and off["prefill_median_abs_err_pct"] == pytest.approx(50.0)


def test_committed_file_round_trip_and_readme_block(tmp_path):
    groups = group_errors(_validated(), "t.csv", "gpt-fast")
    path = tmp_path / "groups.csv"
    path.write_text(groups_csv(groups, "python tools/dev/fidelity_figures.py --groups", ["t.csv"]))
    read, command = read_groups(path)
    assert command == "python tools/dev/fidelity_figures.py --groups"
    assert list(read["framework"]) == ["eager", "gpt-fast"] and read["rows"].tolist() == [2, 3]
    readme = f"intro\n{README_START}\nold table\n{README_END}\nrest\n"
    text = with_readme_table(readme, read)
    assert text.startswith(f"intro\n{README_START}\n| table |") and text.endswith(f"|\n{README_END}\nrest\n")
    assert "old table" not in text and "| t.csv | m | off | eager | 2 | 40.0% | 50.0% | 7.0 pp | 7.0 pp | 50.0% |" in text


def test_the_committed_table_states_every_group_and_the_readme_states_the_same():
    groups, command = read_groups()
    assert command.startswith("PYTHONPATH=$PWD python tools/dev/fidelity_figures.py --groups")
    # Every development table is there, the small paper models' rows included.
    assert {"ladder_70b_tp_sweep.csv", "ladder_8b_tp_sweep.csv", "ladder_flash_p2p_sweep.csv",
            "ladder_graph_p2p_sweep.csv", "ladder_405b_2node.csv", "ladder_pp_sweep.csv"} == set(groups["table"])
    assert {"paper-1b", "paper-3b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"} == set(groups["model"])
    assert all(math.isfinite(v) and v >= 0 for v in groups["tokens_per_s_median_abs_err_pct"])
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index(README_START) + len(README_START):readme.index(README_END)]
    assert block.strip() == groups_markdown(groups)  # regenerated together: one command writes both


def test_the_report_quotes_every_group(tmp_path):
    from laddersim.reporting.paper_section import paper_section

    section = paper_section(tmp_path, tmp_path / "figures")
    groups, command = read_groups()
    assert groups_markdown(groups) in section.body and command in section.body


def _readme_block() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index(README_START) + len(README_START):readme.index(README_END)].strip()


def test_the_development_tables_ship_with_their_provenance():
    paths = development_table_paths()
    assert [p.name for p in paths] == list(DEVELOPMENT_TABLES) and all(p.is_file() for p in paths)
    folder = paths[0].parent
    provenance = (folder / "PROVENANCE.md").read_text()
    assert all(f"`{name}`" in provenance for name in DEVELOPMENT_TABLES)
    assert {p.name for p in (folder / "models").glob("*.json")} == {"paper-1b.json", "paper-3b.json",
                                                                     "llama-3.1-405b.json"}
    frame, tables = read_development_tables()
    assert len(frame) == len(tables) == 673
    assert [tables.count(name) for name in DEVELOPMENT_TABLES] == [70, 75, 190, 290, 8, 40]
    # The graph table's paper models are read from the shipped models/ folder, not left as bare names.
    assert {Path(m).name for m in frame["model"] if "paper" in m} == {"paper-1b.json", "paper-3b.json"}


@pytest.fixture(scope="module")
def validate_without_a_table(tmp_path_factory):
    """``laddersim validate`` with no table, as a user of a fresh clone or a wheel runs it: stdout
    and the report folder."""
    from laddersim.cli import main

    out = tmp_path_factory.mktemp("validate") / "report"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["validate", "--report", str(out)]) == 0
    return printed.getvalue(), out


def test_validate_without_a_table_prints_the_readmes_table(validate_without_a_table):
    printed, _ = validate_without_a_table
    assert printed.strip() == _readme_block()


def test_the_shipped_tables_reproduce_the_committed_groups_exactly(validate_without_a_table):
    import laddersim

    committed, _ = read_groups()
    frame = laddersim.validate()  # the library's default is the CLI's
    pd.testing.assert_frame_equal(frame.attrs["development_groups"], committed)
    assert len(frame) == 673 and frame.attrs["report"] is None


def test_validate_without_a_table_writes_the_committed_validation_report(validate_without_a_table):
    """reports/validation/ holds every development table validated together: the same rows and
    predictions, byte for byte, as validating the shipped copies."""
    _, out = validate_without_a_table
    for name in ("measured.csv", "validation.csv", "models/paper-1b.json", "models/paper-3b.json"):
        assert (out / name).read_bytes() == (ROOT / "reports" / "validation" / name).read_bytes(), name
    assert "Reproduce: `laddersim validate " in (out / "index.md").read_text()
