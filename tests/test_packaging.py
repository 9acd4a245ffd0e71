"""The package carries what its commands need, finds it through laddersim.support.resources alone, and
records which laddersim and which profiles made a result."""

from __future__ import annotations

import ast
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from laddersim.support import resources
from laddersim.cli import main
from laddersim.errors import UserInputError
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.profile import list_profiles, load_profile
from laddersim.support.provenance import laddersim_version, profile_sha256

REPO = Path(__file__).resolve().parents[1]


def test_nothing_in_the_package_imports_from_a_folder_above_it():
    top_level = {"calibration", "tools", "tests", "benchmarks", "examples", "hardware_profiles"}
    offenders = []
    for path in (REPO / "laddersim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in top_level]
    assert offenders == []


def test_resources_of_a_checkout_are_its_top_level_folders():
    assert resources.source_checkout() == REPO
    assert resources.resource_path("hardware_profiles", "h100-sxm-nvswitch.yaml").is_file()
    assert resources.resource_path("calibration", "calibrate_all.py").is_file()
    assert resources.data_path("validation", "ladder_70b_tp_sweep.csv").is_file()
    with pytest.raises(ValueError):
        resources.resource_path("runs")
    assert resources.calibration_module("ladder_csv").__name__ == "calibration.ladder_csv"


def test_examples_are_found_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resources.given_or_shipped("examples/sweep_bandwidth.yaml") == REPO / "examples" / "sweep_bandwidth.yaml"
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "sweep_bandwidth.yaml").write_text("models: [llama-3.1-8b]\n")
    assert resources.given_or_shipped("examples/sweep_bandwidth.yaml") == Path("examples/sweep_bandwidth.yaml")
    assert resources.given_or_shipped("elsewhere/x.yaml") == Path("elsewhere/x.yaml")


def test_example_model_configs_are_found_from_any_folder(tmp_path, monkeypatch):
    """The README's --model examples/small-4l-512/config.json works where no examples/ is (the
    wheel case); a config.json of the user's own under examples/ is read first."""
    from laddersim.model.shape import load_model_shape

    monkeypatch.chdir(tmp_path)
    shipped = load_model_shape("examples/small-4l-512/config.json")
    assert (shipped.n_layers, shipped.dim) == (4, 512)
    assert load_model_shape("examples/small-4l-512") == shipped
    own = tmp_path / "examples" / "small-4l-512"
    own.mkdir(parents=True)
    config = json.loads((REPO / "examples" / "small-4l-512" / "config.json").read_text())
    (own / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    assert load_model_shape("examples/small-4l-512/config.json").n_layers == 2
    with pytest.raises(UserInputError, match="unknown preset 'examples/none/config.json'"):
        load_model_shape("examples/none/config.json")


def test_the_wheel_carries_profiles_tables_programs_examples_and_data(tmp_path):
    """Build the wheel from a copy of the checkout (the build writes build/ beside the sources)."""
    from wheel_venv import build_wheel

    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = "laddersim/_resources/"
    for folder, pattern in (("hardware_profiles", "*.yaml"), ("hardware_profiles", "tables/*.csv"),
                            ("calibration", "*.py"), ("calibration", "*.md"), ("examples", "*.yaml"),
                            ("examples", "*/*.json")):
        files = {f"{shipped}{folder}/{p.relative_to(REPO / folder).as_posix()}" for p in (REPO / folder).glob(pattern)}
        assert files and files <= names, (folder, pattern, sorted(files - names)[:5])
    data = {f"laddersim/{p.relative_to(REPO / 'laddersim').as_posix()}" for p in (REPO / "laddersim" / "data").rglob("*")
            if p.is_file()}
    assert data and data <= names
    modules = {f"{p.relative_to(REPO).as_posix()}" for p in (REPO / "laddersim").rglob("*.py")}
    assert modules <= names, sorted(modules - names)[:5]


def test_profile_hash_follows_values_and_table_bytes(tmp_path):
    profile = load_profile("h100-sxm-nvswitch")
    assert profile_sha256(profile) == profile_sha256(load_profile("h100-sxm-nvswitch"))
    assert profile_sha256(with_overrides(profile, compute_slowdown=0.2)) != profile_sha256(profile)
    hashes = {profile_sha256(load_profile(name)) for name in list_profiles()}
    assert len(hashes) == len(list_profiles())
    # A copy elsewhere hashes the same; one changed table byte does not.
    copy = tmp_path / "profiles"
    shutil.copytree(resources.resource_path("hardware_profiles"), copy)
    copied = load_profile(copy / "h100-sxm-nvswitch.yaml")
    assert profile_sha256(copied) == profile_sha256(profile)
    table = copy / profile.collectives.tables[0].file
    table.write_text(table.read_text().replace("\n", "\n#\n", 1))
    assert profile_sha256(load_profile(copy / "h100-sxm-nvswitch.yaml")) != profile_sha256(profile)


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"laddersim {laddersim_version()}"
    assert laddersim_version() != "unknown"


def test_sweep_records_version_and_profile_hashes(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "h100-pcie", "--tp", "2",
                 "--prompt-len", "16", "--gen-len", "2", "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    capsys.readouterr()
    record = json.loads((out / "provenance.json").read_text())
    assert record == {"laddersim_version": laddersim_version(),
                      "profiles": {n: profile_sha256(load_profile(n)) for n in ("h100-pcie", "h100-sxm-nvswitch")}}


def test_profiles_report_without_shared_keeps_a_report_made_from_more_data(tmp_path, monkeypatch):
    from laddersim.profiles_check import report

    monkeypatch.setenv("LADDERSIM_SHARED", str(tmp_path / "no-shared"))
    richer = tmp_path / "reports" / "collectives.md"
    richer.parent.mkdir()
    richer.write_text(f"compared with {report.ORIGINAL_ROWS_MARK}\n")
    with pytest.raises(UserInputError, match="original measurement files"):
        report.report_target(richer)
    assert report.report_target(tmp_path / "new.md") == tmp_path / "new.md"
    monkeypatch.setattr(report, "default_report_path", lambda: richer)
    assert report.report_target(None) == tmp_path / "runs" / "collectives" / "collectives.md"
    assert richer.read_text() == f"compared with {report.ORIGINAL_ROWS_MARK}\n"
