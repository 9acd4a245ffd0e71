"""The sweep grid: lists of values whose cross product is the set of points to simulate.

A grid file is YAML, every key a list (a single value stands for a one-element list)::

    models: [llama-3.1-70b]
    hardware: [h100-sxm-nvswitch]
    tp: [2, 4, 8]
    batch: [1, 16]
    schedules: [standard, ladder]
    overrides:
      intra_bandwidth_gbps: [100, 200, 400]

Override keys come in "scale" and "set" pairs (see laddersim.sweeps.overrides for how a set value
becomes a scale of the profile); one grid gives at most one of each pair.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from laddersim.support.choices import FP8_DTYPE_REFUSAL
from laddersim.support.config_files import build, read_yaml_mapping
from laddersim.support.limits import EXCLUSIVE_PAIRS, MAX_BATCH, MAX_TOKENS, MAX_TP, OVERRIDE_COLUMNS, override_problem
from laddersim.schedules.plan import SCHEDULE_NAMES
from laddersim.traffic.sweep_axes import ServingAxes

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def _as_list(value):
    """A scalar in a grid means a one-element list."""
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, tuple):
        return list(value)
    return [value]


class Overrides(BaseModel):
    """What-if values to sweep; unset keys leave the profile as it is."""

    model_config = _FROZEN

    intra_bandwidth_scale: list[float] | None = None  # x the intra-node bus bandwidth
    intra_bandwidth_gbps: list[float] | None = None  # intra-node bus bandwidth, GB/s
    intra_latency_scale: list[float] | None = None  # x the intra-node latency terms
    intra_latency_us: list[float] | None = None  # intra-node base latency, us
    inter_bandwidth_scale: list[float] | None = None
    inter_bandwidth_gbps: list[float] | None = None  # inter-node (network) bus bandwidth, GB/s
    inter_latency_scale: list[float] | None = None
    inter_latency_us: list[float] | None = None  # inter-node base latency, us
    nics_per_node: list[float] | None = None
    compute_slowdown: list[float] | None = None  # fraction, see InterferenceSpec
    comm_slowdown: list[float] | None = None
    gpus_per_node: list[float] | None = None  # GPUs per node (whole numbers; laddersim.hardware.node_size)

    @field_validator("*", mode="before")
    @classmethod
    def _wrap(cls, value):
        return _as_list(value)

    @field_validator("*")
    @classmethod
    def _check_values(cls, values, info):
        if values is None:
            return values
        if not values:
            raise ValueError("must list at least one value")
        for value in values:
            if (problem := override_problem(info.field_name, value)) is not None:
                raise ValueError(problem)
        return [float(v) for v in values]

    @model_validator(mode="after")
    def _one_of_each_pair(self) -> "Overrides":
        for scale_key, set_key in EXCLUSIVE_PAIRS:
            if getattr(self, scale_key) is not None and getattr(self, set_key) is not None:
                raise ValueError(f"give {scale_key} or {set_key}, not both")
        return self

    def swept(self) -> dict[str, list[float]]:
        """The keys given, in OVERRIDE_COLUMNS order."""
        return {k: getattr(self, k) for k in OVERRIDE_COLUMNS if getattr(self, k) is not None}


class SweepGrid(BaseModel):
    """Lists of scenario inputs; the sweep is their cross product."""

    model_config = _FROZEN

    models: list[str] = Field(min_length=1)  # presets or paths to config.json
    hardware: list[str] = Field(min_length=1)  # profile names or paths
    tp: list[int] = Field(min_length=1)
    pp: list[int] = Field(default=[1], min_length=1)  # pipeline stages, each a TP group (laddersim.pipeline)
    pp_microbatches: list[int] = Field(default=[1], min_length=1)  # batches in flight through the stages
    batch: list[int] = Field(default=[1], min_length=1)
    prompt_len: list[int] = Field(default=[1024], min_length=1)
    gen_len: list[int] = Field(default=[512], min_length=1)
    schedules: list[str] = Field(default=["standard", "ladder"], min_length=1)
    dtype: list[Literal["bfloat16", "float16", "float32", "fp8"]] = Field(default=["bfloat16"], min_length=1)
    kv_cache: list[Literal["static", "dynamic"]] = Field(default=["static"], min_length=1)
    kv_reads: list[Literal["repeat_interleave", "per_kv_head"]] = Field(default=["repeat_interleave"], min_length=1)
    # A mixture-of-experts model's expert-parallel ranks in each TP group; None: 1 (not written
    # to the grid.yaml a sweep keeps, so a grid without it reads as before).
    ep: list[int] | None = Field(default=None, min_length=1)
    # Every point with data-parallel attention (laddersim.model.dp_attention: tp each attention
    # replica's, ep all GPUs'); None: off (not written to the grid.yaml a sweep keeps).
    dp_attention: bool | None = None
    overrides: Overrides = Overrides()
    serving: ServingAxes | None = None  # every point one replica under load (laddersim.traffic.sweep_axes)

    # Directory relative paths in the grid are taken from (the grid file's); not part of the grid.
    base_dir: str = Field(default="", exclude=True)

    @field_validator("models", "hardware", "tp", "pp", "pp_microbatches", "batch", "prompt_len", "gen_len", "schedules", "dtype",
                     "kv_cache", "kv_reads", "ep", mode="before")
    @classmethod
    def _wrap(cls, value):
        return _as_list(value)

    @field_validator("dtype")
    @classmethod
    def _no_fp8(cls, values: list[str]) -> list[str]:
        if "fp8" in values:  # a quantization of the linears (simulate --quant fp8), not a sweep dtype
            raise ValueError(FP8_DTYPE_REFUSAL)
        return values

    @field_validator("tp", "pp", "pp_microbatches", "batch", "prompt_len", "gen_len", "ep")
    @classmethod
    def _positive(cls, values: list[int] | None, info) -> list[int] | None:
        maximum = {"tp": MAX_TP, "pp": MAX_TP, "ep": MAX_TP, "pp_microbatches": MAX_BATCH,
                   "batch": MAX_BATCH}.get(info.field_name, MAX_TOKENS)
        for value in values or ():
            if not 1 <= value <= maximum:
                raise ValueError(f"must be positive integers up to {maximum}, got {value}")
        return values

    @field_validator("schedules")
    @classmethod
    def _known_schedules(cls, values: list[str]) -> list[str]:
        for name in values:
            hybrid = name.startswith("hybrid:") and name.split(":", 1)[1].isdigit()
            if name not in SCHEDULE_NAMES[:-1] and not hybrid:
                raise ValueError(f"unknown schedule '{name}'; allowed: {', '.join(SCHEDULE_NAMES)}")
        return values


def parse_grid(raw, where: str = "grid", base_dir: str | Path = "") -> SweepGrid:
    return build(SweepGrid, raw, where, base_dir=str(base_dir))


def load_grid(path: str | Path) -> SweepGrid:
    """Read a grid YAML file; relative model/profile paths in it are relative to the file."""
    path = Path(path)
    return parse_grid(read_yaml_mapping(path, "grid"), where=f"grid {path.name}", base_dir=path.resolve().parent)
