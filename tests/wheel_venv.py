"""A fresh virtual environment with laddersim installed from a wheel built from this working tree,
as a user who ran ``pip install laddersim-*.whl`` has it (tests/test_readme.py runs the READMEs'
commands in it, from an empty folder).

Installing torch and the other dependencies again would take minutes: the new venv sees the
test interpreter's site-packages through a ``.pth`` line instead (plain path lines: the
editable install of this checkout that may live there is never activated, so ``import
laddersim`` finds the wheel's copy and nothing else of the checkout).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What the build reads: the package, the data folders the wheel carries, and the build files.
SOURCES = ("laddersim", "hardware_profiles", "calibration", "examples")
BUILD_FILES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


def build_wheel(out_dir: Path) -> Path:
    """Build the wheel from a copy of the working tree's sources (the build writes build/ beside
    them) into ``out_dir``; returns its path."""
    src = out_dir / "src"
    src.mkdir(parents=True)
    for folder in SOURCES:
        shutil.copytree(REPO / folder, src / folder, ignore=IGNORE)
    for name in BUILD_FILES:
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                           "--disable-pip-version-check", "-w", str(out_dir / "dist"), str(src)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building the wheel failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    (wheel,) = (out_dir / "dist").glob("laddersim-*.whl")
    return wheel


def install_in_fresh_venv(wheel: Path, venv: Path) -> Path:
    """A new venv with ``wheel`` installed (console script ``laddersim`` included); the
    dependencies come from the test interpreter's site-packages. Returns the venv's bin folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                           "--no-index", "--disable-pip-version-check", str(wheel)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"installing the wheel failed:\n{proc.stderr[-3000:]}")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    dependencies = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    (Path(purelib) / "_laddersim_test_dependencies.pth").write_text("\n".join(dependencies) + "\n")
    return venv / "bin"


def user_env(bin_dir: Path) -> dict[str, str]:
    """The environment of a user whose shell has the venv activated: its bin first on PATH, no
    PYTHONPATH (nothing of the checkout importable), a display-free matplotlib."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(bin_dir.parent),
               MPLBACKEND="Agg")
    return env
