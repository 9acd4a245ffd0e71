"""What made a result: the laddersim version and a hash of every hardware profile used.

Run directories, sweep outputs and reports record ``provenance([...profiles])`` so a number can
be traced to the code and the exact profile values (and measured tables) it came from.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

from laddersim.errors import UserInputError


def laddersim_version() -> str:
    """The installed distribution's version (pyproject.toml's when run from a checkout)."""
    try:
        return metadata.version("laddersim")
    except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, never installed
        return _pyproject_version()


def _pyproject_version() -> str:
    from laddersim.support.resources import source_checkout

    root = source_checkout()
    if root is not None:
        for line in (root / "pyproject.toml").read_text().splitlines():
            if line.startswith("version = "):
                return line.split("=", 1)[1].strip().strip('"')
    return "unknown"


def profile_sha256(profile) -> str:
    """SHA-256 of a profile's values (what-if overrides included, the folder it was loaded from
    excluded) and of the bytes of every table it names: equal hashes, equal simulations."""
    digest = hashlib.sha256(json.dumps(profile.model_dump(mode="json"), sort_keys=True).encode())
    for table in [*profile.collectives.tables, *profile.gpu.gemm_tables, *profile.gpu.quantized_gemm_tables]:
        path = Path(profile.base_dir) / table.file
        try:
            digest.update(f"\n{table.file}\n".encode() + path.read_bytes())
        except OSError as exc:
            raise UserInputError(f"hardware: cannot read {path}: {exc.strerror}") from None
    return digest.hexdigest()


def provenance(profiles) -> dict:
    """``{"laddersim_version": ..., "profiles": {name: sha256}}`` for the profiles used."""
    return {"laddersim_version": laddersim_version(),
            "profiles": {p.name: profile_sha256(p) for p in profiles}}
