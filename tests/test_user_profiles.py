"""A user's own profile outside the checkout (``extends:``), and GPUs per node as a what-if: the
base profile's tables stay its own, the intra-node fits that still hold are kept, and the sweep
takes ``gpus_per_node`` as an axis (issue 32, item 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from laddersim.errors import UserInputError
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.profile import load_profile, profiles_dir
from laddersim.simulation.simulate import make_scenario, simulate
from laddersim.sweeps import run_sweep
from laddersim.sweeps.grid import OVERRIDE_COLUMNS, parse_grid
from laddersim.sweeps.points import INPUT_COLUMNS, point_key

H100 = "h100-sxm-nvswitch"


def _user_profile(folder, gpus_per_node=4, extends=H100):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "h100-4gpn.yaml"
    path.write_text(yaml.safe_dump({"extends": extends, "name": "h100-4gpn",
                                    "node": {"gpus_per_node": gpus_per_node}}))
    return path


def test_a_user_profile_in_any_folder_extends_a_shipped_one(tmp_path):
    profile = load_profile(_user_profile(tmp_path / "my-profiles"))
    base = load_profile(H100)
    assert profile.node.gpus_per_node == 4 and profile.node.fabric == base.node.fabric
    # The base's tables are read from the base's folder, not the user's.
    assert [t.file for t in profile.collectives.tables] == [
        str((profiles_dir() / t.file).resolve()) for t in base.collectives.tables]
    assert len(profile.allreduce_arrays) == len(base.collectives.tables)
    # The fits for 2 and 4 GPUs still hold inside a 4-GPU node, and say so; the 8-GPU one is gone.
    assert [f.gpus for f in profile.collectives.intra_node_fits] == [2, 4]
    for fit, base_fit in zip(profile.collectives.intra_node_fits, base.collectives.intra_node_fits):
        assert fit.terms == base_fit.terms
        assert fit.source.startswith(base_fit.source)
        assert f"fitted on the 8-GPU node of {H100}, kept for a node of 4 GPUs" in fit.source
    assert "intra_node_fits for 8 GPUs" in profile.provenance["node"]


def test_tp8_as_two_nodes_of_four_gpus_simulates_from_an_empty_folder(tmp_path):
    path = _user_profile(tmp_path / "my-profiles")
    run = subprocess.run([sys.executable, "-m", "laddersim", "simulate", "--hardware", "my-profiles/h100-4gpn.yaml",
                          "--model", "llama-3.1-8b", "--tp", "8", "--prompt-len", "128", "--gen-len", "8", "--json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = {r["schedule"]: r for r in json.loads(run.stdout)}
    assert rows["standard"]["nodes"] == 2 and rows["ladder"]["nodes"] == 2
    one_node = simulate(make_scenario(model="llama-3.1-8b", hardware=H100, tp=8, batch=1, prompt_len=128, gen_len=8,
                                      schedule="standard")).summary()
    # The network hop makes the standard schedule slower than on one 8-GPU node.
    assert rows["standard"]["tokens_per_s"] < one_node["tokens_per_s"]
    assert path.exists()


def test_extends_by_path_keeps_each_profile_its_own_tables(tmp_path):
    # A base profile of the user's own, in another folder with its own tables/, extended by a
    # relative path from a third folder.
    shutil.copytree(profiles_dir() / "tables", tmp_path / "lab" / "tables")
    shutil.copy(profiles_dir() / f"{H100}.yaml", tmp_path / "lab" / "base.yaml")
    profile = load_profile(_user_profile(tmp_path / "me", gpus_per_node=2, extends="../lab/base.yaml"))
    assert all(t.file.startswith(str((tmp_path / "lab" / "tables").resolve())) for t in profile.collectives.tables)
    assert [f.gpus for f in profile.collectives.intra_node_fits] == [2]


def test_restated_fits_are_the_users_and_still_checked(tmp_path):
    path = tmp_path / "p.yaml"
    fits = yaml.safe_load((profiles_dir() / f"{H100}.yaml").read_text())["collectives"]["intra_node_fits"]
    path.write_text(yaml.safe_dump({"extends": H100, "node": {"gpus_per_node": 4},
                                    "collectives": {"intra_node_fits": fits}}))
    with pytest.raises(UserInputError, match="a fit for 8 GPUs, but node.gpus_per_node is 4"):
        load_profile(path)


def test_the_gpus_per_node_override_is_the_derived_profile(tmp_path):
    derived = load_profile(_user_profile(tmp_path))
    overridden = with_overrides(load_profile(H100), gpus_per_node=4)
    assert overridden.node == derived.node
    assert overridden.collectives.intra_node_fits == derived.collectives.intra_node_fits
    with pytest.raises(UserInputError, match="gpus_per_node must be a whole number of GPUs"):
        with_overrides(load_profile(H100), gpus_per_node=2.5)


def test_a_sweep_with_a_gpus_per_node_axis(tmp_path):
    assert "gpus_per_node" in OVERRIDE_COLUMNS
    grid = parse_grid({"models": ["llama-3.1-8b"], "hardware": [H100], "tp": [4, 8], "prompt_len": [128],
                       "gen_len": [8], "schedules": ["standard", "ladder"],
                       "overrides": {"gpus_per_node": [4, 8], "intra_bandwidth_gbps": [200]}})
    frame = run_sweep(grid, tmp_path, workers=1, progress=False).frame
    assert len(frame) == 8 and (frame.status == "ok").all()
    nodes = {(r.tp, r.gpus_per_node): r.nodes for r in frame.itertuples()}
    assert nodes == {(4, 4.0): 1, (4, 8.0): 1, (8, 4.0): 2, (8, 8.0): 1}
    # Each row is the direct simulation of the derived profile with the set bandwidth.
    derived = load_profile(_user_profile(tmp_path / "p"))
    row = frame[(frame.tp == 8) & (frame.gpus_per_node == 4) & (frame.schedule == "ladder")].iloc[0]
    from laddersim.sweeps.overrides import override_scales
    profile = with_overrides(derived, **override_scales(derived, {"intra_bandwidth_gbps": 200.0}, 8))
    direct = simulate(make_scenario(model="llama-3.1-8b", hardware=profile, tp=8, batch=1, prompt_len=128, gen_len=8,
                                    schedule="ladder")).summary()
    assert row.tokens_per_s == direct["tokens_per_s"]


def test_a_bad_gpus_per_node_is_one_line():
    with pytest.raises(UserInputError, match="overrides.gpus_per_node: must be whole numbers of GPUs, got 2.5"):
        parse_grid({"models": ["llama-3.1-8b"], "hardware": [H100], "tp": [8],
                    "overrides": {"gpus_per_node": [2.5]}})


def test_points_without_the_new_axis_keep_their_keys():
    # The key of a point as laddersim computed it before gpus_per_node existed (stores resume).
    inputs = dict.fromkeys(INPUT_COLUMNS)
    inputs.update(model="llama-3.1-8b", hardware=H100, tp=8, batch=1, prompt_len=128, gen_len=16,
                  schedule="ladder", dtype="bfloat16", kv_cache="static", kv_reads="repeat_interleave",
                  nics_per_node=4.0)
    assert point_key(inputs) == "012ce9bc3176ab878035"
    assert point_key({**inputs, "gpus_per_node": 4.0}) != "012ce9bc3176ab878035"
