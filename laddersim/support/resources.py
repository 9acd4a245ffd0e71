"""Where laddersim's shipped files are: the one place that knows, in a checkout or an install.

The repository keeps its data folders at the top level: ``hardware_profiles/`` (profiles and their
compact tables), ``calibration/`` (the torch measuring programs) and ``examples/``. An installed
wheel carries them as ``laddersim/_resources/<folder>/`` (the mapping is in setup.py), and the
package's own data (built-in validation tables, prices) lives in ``laddersim/data/`` either way.
Code that needs one of these files calls ``resource_path`` / ``data_path`` and never builds
paths from ``__file__`` itself.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from laddersim.errors import UserInputError

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # laddersim/ (this file is laddersim/support/resources.py)
_INSTALLED_ROOT = PACKAGE_DIR / "_resources"
FOLDERS = ("hardware_profiles", "calibration", "examples")


def source_checkout() -> Path | None:
    """The repository root when laddersim runs from a source checkout (editable install or
    PYTHONPATH), else None (an installed wheel)."""
    if _INSTALLED_ROOT.is_dir():
        return None
    root = PACKAGE_DIR.parent
    return root if (root / "hardware_profiles").is_dir() else None


def resource_root() -> Path:
    """The folder holding ``hardware_profiles/``, ``calibration/`` and ``examples/``."""
    if _INSTALLED_ROOT.is_dir():
        return _INSTALLED_ROOT
    return PACKAGE_DIR.parent


def resource_path(folder: str, *parts: str) -> Path:
    """A shipped file or folder, e.g. ``resource_path("hardware_profiles", "tables")``."""
    if folder not in FOLDERS:
        raise ValueError(f"unknown resource folder {folder!r}; shipped: {', '.join(FOLDERS)}")
    return resource_root().joinpath(folder, *parts)


def given_or_shipped(path: str | Path) -> Path:
    """``path`` as given when it exists; else, for ``examples/...``, the shipped example (so the
    README's ``laddersim sweep examples/sweep_bandwidth.yaml`` works from any folder)."""
    given = Path(path)
    if given.exists() or given.is_absolute() or given.parts[:1] != ("examples",):
        return given
    shipped = resource_path(*given.parts)
    return shipped if shipped.exists() else given


def data_path(*parts: str) -> Path:
    """A file of the package's own data (``laddersim/data/...``)."""
    return PACKAGE_DIR.joinpath("data", *parts)


def calibration_module(name: str):
    """Import ``calibration.<name>`` from the shipped calibration programs.

    They are a top-level ``calibration`` package beside ``laddersim`` in a checkout and inside
    ``laddersim/_resources/`` in a wheel; their folder's parent goes first on ``sys.path`` so
    that spawned ranks (which re-import by module name) find the same programs.
    """
    folder = resource_path("calibration")
    if not (folder / "calibrate_all.py").exists():
        raise UserInputError(f"calibrate: the calibration programs are missing from {folder}; "
                             "reinstall laddersim")
    root = str(folder.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(f"calibration.{name}")
