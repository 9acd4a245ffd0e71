"""Hardware profiles: one YAML file per system under ``hardware_profiles/``.

Every number in a profile is a ``Sourced`` value: the number in the file's human unit (the unit
is in the field name: ``_tflops``, ``_gb_per_s`` = GB/s (1e9 B/s), ``_us``, ``_gb``) and where it
came from (a measured table with file and rows, a datasheet, or a fit with its data and command).
Properties ending in SI units (``_s``, ``_bytes_per_s``, ``_flops_per_s``, ``_bytes``) convert
once, here; nothing else in laddersim sees human units.

Measured tables (AllReduce times, GEMM times) live beside the profile as small CSV files with
``#`` comment lines citing their source; a profile names them by relative path.
"""

from __future__ import annotations

import os
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field, model_validator

from laddersim.support.config_files import build, read_yaml_mapping
from laddersim.errors import UserInputError
from laddersim.hardware.comm_specs import CollectiveSpec, InterferenceSpec, NetworkSpec, TierFit, WhatIf
from laddersim.hardware.compute_specs import FrameworkSpec, GpuSpec, HostOverheadSpec, NodeSpec
from laddersim.hardware.former_keys import with_current_keys
from laddersim.hardware.node_size import fits_mapping_for_node
from laddersim.hardware.sourced import FROZEN_CONFIG, MeasuredTable
from laddersim.hardware.table_files import file_identity, read_table_arrays, read_table_csv
from laddersim.support.resources import resource_path

if TYPE_CHECKING:  # pandas loads only where a table is read as a frame (profiles check/fit)
    import pandas as pd


# Loaded once per profile object (cached_property keeps them in the instance's __dict__, which
# pydantic's model_copy copies): a copy with other fields must load its own.
LOADED_TABLES = ("allreduce_tables", "allreduce_arrays", "allgather_arrays", "sendrecv_arrays")


class HardwareProfile(BaseModel):
    """A whole system: GPU, node, optional network, collectives, interference, framework."""

    model_config = FROZEN_CONFIG

    name: str
    description: str = ""
    measured: bool = True  # False for forward-looking what-ifs built from datasheets only
    gpu: GpuSpec
    node: NodeSpec
    network: NetworkSpec | None = None
    collectives: CollectiveSpec
    interference: InterferenceSpec
    framework: FrameworkSpec
    host_overhead: HostOverheadSpec | None = None  # None: kernels alone (a compiled, graph-replayed run)
    provenance: dict[str, str] = {}  # free-form: who made it, how (calibration runs, fits)
    what_if: WhatIf = WhatIf()  # scalings for what-if studies; identity in shipped profiles

    # Directory the profile was loaded from (tables are relative to it); not part of the file.
    base_dir: str = Field(default="", exclude=True)

    @model_validator(mode="after")
    def _check_tables_exist(self) -> "HardwareProfile":
        for where, tables in (("collectives.tables", self.collectives.tables),
                              ("collectives.allgather_tables", self.collectives.allgather_tables),
                              ("collectives.sendrecv_tables", self.collectives.sendrecv_tables),
                              ("gpu.gemm_tables", self.gpu.gemm_tables)):
            for table in tables:
                if self.base_dir and not (Path(self.base_dir) / table.file).exists():
                    raise ValueError(f"{where}: file not found: {table.file}")
        nvls = sorted({"nvls", "nvls_tree"} & set(self.collectives.algorithms))
        if nvls and self.node.fabric != "nvswitch":
            raise ValueError(f"collectives.algorithms: {', '.join(nvls)} needs node.fabric nvswitch (NVLink SHARP), "
                             f"not {self.node.fabric}; allowed: ring, tree, collnet")
        counts = [fit.gpus for fit in self.collectives.intra_node_fits]
        if len(counts) != len(set(counts)):
            raise ValueError("collectives.intra_node_fits: two fits for the same gpus count")
        for fit in self.collectives.intra_node_fits:
            if fit.gpus > self.node.gpus_per_node:
                raise ValueError(f"collectives.intra_node_fits: a fit for {fit.gpus} GPUs, but node.gpus_per_node "
                                 f"is {self.node.gpus_per_node}; allowed: gpus 2..{self.node.gpus_per_node}")
        return self

    def nodes_for(self, tp: int) -> int:
        """Nodes a TP group of ``tp`` ranks spans (ranks packed onto as few nodes as possible)."""
        per_node = self.node.gpus_per_node
        if tp <= per_node:
            return 1
        if self.network is None:
            raise UserInputError(
                f"tp: {tp} exceeds the {per_node} GPUs of one {self.name} node and the profile has "
                f"no inter-node network; allowed: 1..{per_node}"
            )
        if tp % per_node:
            raise UserInputError(
                f"tp: {tp} spans nodes but is not a multiple of gpus_per_node ({per_node}) of {self.name}; "
                f"allowed: 1..{per_node} on one node, or {per_node * 2}, {per_node * 3}, ... across nodes"
            )
        return tp // per_node

    def model_copy(self, *, update=None, deep: bool = False) -> "HardwareProfile":
        copied = super().model_copy(update=update, deep=deep)
        for name in LOADED_TABLES:
            copied.__dict__.pop(name, None)
        return copied

    @cached_property
    def allreduce_tables(self) -> list[tuple[MeasuredTable, "pd.DataFrame"]]:
        """Loaded measured AllReduce tables: columns gpus, nodes, size_bytes, time_s."""
        out = []
        for table in self.collectives.tables:
            frame = read_table_csv(Path(self.base_dir) / table.file)
            out.append((table, frame))
        return out

    @cached_property
    def allreduce_arrays(self) -> list[tuple[MeasuredTable, dict[str, np.ndarray]]]:
        """The measured AllReduce tables as numpy columns (gpus, nodes, size_bytes, time_s), sorted
        like ``allreduce_tables``: what the simulator reads, without loading pandas."""
        return [(table, read_table_arrays(Path(self.base_dir) / table.file)) for table in self.collectives.tables]

    @cached_property
    def allgather_arrays(self) -> list[tuple[MeasuredTable, dict[str, np.ndarray]]]:
        """The measured AllGather tables as numpy columns (gpus, nodes, size_bytes, time_s)."""
        return [(table, read_table_arrays(Path(self.base_dir) / table.file))
                for table in self.collectives.allgather_tables]

    @cached_property
    def sendrecv_arrays(self) -> list[tuple[MeasuredTable, dict[str, np.ndarray]]]:
        """The measured point-to-point tables as numpy columns (gpus, nodes, size_bytes, time_s)."""
        return [(table, read_table_arrays(Path(self.base_dir) / table.file))
                for table in self.collectives.sendrecv_tables]

    def intra_node_fit(self, gpus: int) -> TierFit | None:
        return next((f for f in self.collectives.intra_node_fits if f.gpus == gpus), None)


def profiles_dir() -> Path:
    """Where named profiles live: $LADDERSIM_PROFILES, else the shipped ``hardware_profiles/``."""
    env = os.environ.get("LADDERSIM_PROFILES")
    if env:
        return Path(env)
    return resource_path("hardware_profiles")


def list_profiles() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.yaml"))


def _resolve(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if path.is_dir() and (path / "profile.yaml").exists():
        return path / "profile.yaml"
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    named = profiles_dir() / f"{name_or_path}.yaml"
    if named.exists():
        return named
    if path.is_dir() and (path / "run.json").exists():  # laddersim.measure.environment.MANIFEST
        raise UserInputError(f"hardware: {name_or_path} is a calibration run without a profile yet; "
                             f"run `laddersim calibrate fit {name_or_path} --name NAME` first")
    allowed = (f"allowed: {', '.join(list_profiles())} or a path to a profile .yaml (or a calibration run "
               "directory)")
    if path.is_dir():
        raise UserInputError(f"hardware: {name_or_path} is a folder but neither a fitted calibration run nor a "
                             "calibration run: it has no profile.yaml (`laddersim calibrate fit` writes it) and no "
                             f"run.json (`laddersim calibrate run` writes it); {allowed}")
    if path.exists():
        raise UserInputError(f"hardware: {name_or_path} is a file but not a profile: a profile is a .yaml file; {allowed}")
    if len(path.parts) > 1 or path.suffix in (".yaml", ".yml"):
        raise UserInputError(f"hardware: {name_or_path} does not exist; {allowed}")
    raise UserInputError(f"hardware: unknown profile '{name_or_path}'; {allowed}")


def parse_profile(raw: dict, base_dir: Path, where: str = "hardware") -> HardwareProfile:
    return build(HardwareProfile, with_current_keys(raw, where), where, base_dir=str(base_dir))


def _merged(base: dict, changes: dict) -> dict:
    """``base`` with ``changes`` laid over it: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# Where a profile names measured tables (relative to its own folder).
TABLE_LISTS = (("collectives", "tables"), ("collectives", "allgather_tables"), ("collectives", "sendrecv_tables"),
               ("gpu", "gemm_tables"))


def _tables_from(mapping: dict, folder: Path) -> dict:
    """``mapping`` with its relative table paths made absolute against ``folder``: a base profile's
    tables stay its own wherever the profile extending it lives."""
    out = dict(mapping)
    for section, key in TABLE_LISTS:
        part = out.get(section)
        if not isinstance(part, dict) or not isinstance(part.get(key), list):
            continue
        tables = [{**t, "file": str((folder / t["file"]).resolve())}
                  if isinstance(t, dict) and isinstance(t.get("file"), str) and not Path(t["file"]).is_absolute()
                  else t for t in part[key]]
        out[section] = {**part, key: tables}
    return out


def _base_path(base_name: str, folder: Path) -> Path:
    """The profile ``extends:`` names: a path relative to the extending file, else as ``_resolve``."""
    near = folder / base_name
    if near.suffix in (".yaml", ".yml") and near.exists():
        return near
    return _resolve(base_name)


def read_profile_mapping(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A profile file's mapping; ``extends: NAME`` takes a named profile (or a path, relative to the
    file) as its base: the same machine on another fabric or node size restates only what
    differs. The base's table paths stay relative to the base's folder. A derived profile that
    changes ``node.gpus_per_node`` without restating ``collectives.intra_node_fits`` keeps the
    base's fits that still hold (``laddersim.hardware.node_size``)."""
    raw = with_current_keys(read_yaml_mapping(path, "hardware"), f"hardware {path.name}")
    base_name = raw.pop("extends", None)
    if base_name is None:
        return raw
    base_path = _base_path(str(base_name), path.parent)
    if base_path.resolve() in seen or base_path.resolve() == path.resolve():
        raise UserInputError(f"hardware {path.name}: extends: {base_name} extends itself; allowed: another profile")
    base = read_profile_mapping(base_path, seen + (path.resolve(),))
    if base_path.resolve().parent != path.resolve().parent:
        base = _tables_from(base, base_path.resolve().parent)
    merged = _merged(base, raw)
    restated = isinstance(raw.get("collectives"), dict) and "intra_node_fits" in raw["collectives"]
    base_node, node = base.get("node"), merged.get("node")
    if not restated and isinstance(base_node, dict) and isinstance(node, dict):
        merged = fits_mapping_for_node(merged, str(base.get("name", base_name)), base_node.get("gpus_per_node"),
                                       node.get("gpus_per_node"))
    return merged


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A profile by name (``h100-sxm-nvswitch``), by path, or a calibration run directory."""
    path = _resolve(name_or_path)
    return _load_profile(*file_identity(path), path)


@lru_cache(maxsize=64)
def _load_profile(_resolved: Path, _mtime_ns: int, _size: int, path: Path) -> HardwareProfile:
    # Once per file version and process (profiles are frozen): a run of several schedules, or a
    # sweep worker, parses each file once.
    return parse_profile(read_profile_mapping(path), path.parent, where=f"hardware {path.name}")
