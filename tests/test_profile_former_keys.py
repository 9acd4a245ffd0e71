"""A user's profile file written with a former ``*_gbps`` key (GB/s) still loads: the key is read
as its ``*_gb_per_s`` name, and stderr says once which name to write."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from laddersim.errors import UserInputError
from laddersim.hardware import former_keys
from laddersim.hardware.profile import load_profile, parse_profile, profiles_dir

H100 = "h100-sxm-nvswitch"


def _old_style_copy(folder):
    """The shipped H100 profile with every renamed key written the former way, tables beside it."""
    text = (profiles_dir() / f"{H100}.yaml").read_text()
    for old, new in former_keys.FORMER_KEYS.items():
        text = text.replace(f"{new}:", f"{old}:")
    assert "memory_bandwidth_gbps:" in text and "bus_bandwidth_gbps:" in text
    folder.mkdir()
    (folder / "tables").symlink_to(profiles_dir() / "tables")
    path = folder / "old.yaml"
    path.write_text(text)
    return path


def test_a_file_with_former_keys_loads_as_the_shipped_profile(tmp_path):
    old = load_profile(_old_style_copy(tmp_path / "lab"))
    shipped = load_profile(H100)
    assert old.gpu.memory_bandwidth_gb_per_s == shipped.gpu.memory_bandwidth_gb_per_s
    assert old.collectives == shipped.collectives and old.network == shipped.network


def test_stderr_names_each_new_key_once(tmp_path):
    path = _old_style_copy(tmp_path / "lab")
    code = (f"from laddersim.hardware.profile import load_profile, parse_profile, read_profile_mapping\n"
            f"load_profile({str(path)!r})\n"
            f"parse_profile(read_profile_mapping(__import__('pathlib').Path({str(path)!r})), {str(path.parent)!r})\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert "hardware old.yaml: key memory_bandwidth_gbps is read as memory_bandwidth_gb_per_s (GB/s); " \
           "write memory_bandwidth_gb_per_s" in lines
    assert len(lines) == len(set(line.split(": ", 1)[1] for line in lines))  # each key once


def test_a_key_stated_both_ways_is_refused_naming_it():
    raw = yaml.safe_load((profiles_dir() / f"{H100}.yaml").read_text())
    raw["gpu"]["memory_bandwidth_gbps"] = raw["gpu"]["memory_bandwidth_gb_per_s"]
    with pytest.raises(UserInputError, match="memory_bandwidth_gbps"):
        parse_profile(raw, profiles_dir())
