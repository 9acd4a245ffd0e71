"""Grid -> points: the cross product, each point keyed by a stable hash of its input columns."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from laddersim.hardware.profile import load_profile
from laddersim.model.shape import PRESETS, load_model_shape
from laddersim.traffic.sweep_axes import SERVING_COLUMNS
from laddersim.sweeps.grid import OVERRIDE_COLUMNS, SweepGrid

SCENARIO_COLUMNS = ("model", "hardware", "tp", "pp", "pp_microbatches", "batch", "prompt_len", "gen_len", "schedule",
                    "dtype", "kv_cache", "kv_reads")
# Every input of a point, in table order; the result table is sorted by these.
INPUT_COLUMNS = SCENARIO_COLUMNS + OVERRIDE_COLUMNS
# Inputs added later key a point only where they differ from what every point had before (so
# older stores keep their keys): an override column where set, ``pp`` where the pipeline has stages.
KEYED_UNLESS = {"gpus_per_node": None, "pp": 1, "pp_microbatches": 1}


@dataclass(frozen=True)
class Point:
    """One scenario of a sweep. ``model``/``hardware`` are as written in the grid (they key the
    point); ``model_ref``/``hardware_ref`` are what workers load (file paths made absolute)."""

    model: str
    hardware: str
    tp: int
    batch: int
    prompt_len: int
    gen_len: int
    schedule: str
    dtype: str
    kv_cache: str
    overrides: tuple[tuple[str, float | None], ...]  # (column, value or None), OVERRIDE_COLUMNS order
    model_ref: str
    hardware_ref: str
    kv_reads: str = "repeat_interleave"
    serving: tuple[tuple[str, object], ...] | None = None  # (column, value) of a serving point
    pp: int = 1  # pipeline stages
    pp_microbatches: int = 1  # batches in flight through them
    ep: int = 1  # a mixture-of-experts model's expert-parallel ranks in each TP group
    dp_attention: bool = False  # data-parallel attention: tp each replica's, ep all GPUs'

    def inputs(self) -> dict:
        """The input columns of this point's result row (``ep`` only where the experts are placed,
        ``dp_attention`` only where on, so a dense point's row and key are what they were)."""
        row = {c: getattr(self, c) for c in SCENARIO_COLUMNS}
        if self.ep != 1:
            row["ep"] = self.ep
        if self.dp_attention:
            row["dp_attention"] = True
        row.update(self.overrides)
        row.update(self.serving or ())
        return row

    @cached_property
    def key(self) -> str:
        """Stable across runs and machines: a hash of the input columns only (computed once per
        point: a sweep asks for it when it expands, stores, resumes and consolidates)."""
        return point_key(self.inputs())


def point_key(inputs: dict) -> str:
    # Serving columns join the key only where present, so other points keep their keys; so do
    # the inputs added later (KEYED_UNLESS) where they differ from what older points had.
    # The text is json.dumps([[column, value], ...], separators=(",", ":")), put together from
    # each pair's own text (column names are plain ASCII; a grid repeats its values).
    pairs = [_pair_text(c, inputs[c]) for c in INPUT_COLUMNS if _keyed(c, inputs[c])]
    pairs += [_pair_text("ep", inputs["ep"])] if inputs.get("ep", 1) != 1 else []  # (Point.inputs: only where != 1)
    pairs += [_pair_text("dp_attention", True)] if inputs.get("dp_attention") else []  # (only where on)
    pairs += [_pair_text(c, inputs[c]) for c in SERVING_COLUMNS if c in inputs]
    return hashlib.sha256(("[" + ",".join(pairs) + "]").encode()).hexdigest()[:20]


def _keyed(column: str, value) -> bool:
    return column not in KEYED_UNLESS or value not in (None, KEYED_UNLESS[column])


_pair_texts: dict[tuple, str] = {}


def _pair_text(column: str, value) -> str:
    """``json.dumps([column, value], separators=(",", ":"))``, remembered (by type, and a float by
    its repr: 1, 1.0 and True, or 0.0 and -0.0, are equal keys of a dict, not equal texts)."""
    try:
        key = (column, type(value), repr(value) if type(value) is float else value)
        text = _pair_texts.get(key)
    except TypeError:  # an unhashable value (a list): not remembered
        return json.dumps([column, value], separators=(",", ":"))
    if text is None:
        text = json.dumps([column, value], separators=(",", ":"))
        if len(_pair_texts) < 65536:
            _pair_texts[key] = text
    return text


def _ref(name: str, base_dir: str, suffixes: tuple[str, ...]) -> str:
    """An existing file path (relative to the grid file, else to the working directory) made
    absolute so worker processes anywhere load the same file; names pass through."""
    for root in ([Path(base_dir)] if base_dir else []) + [Path.cwd()]:
        path = root / name
        if path.exists() and (path.is_dir() or path.suffix in suffixes):
            return str(path.resolve())
    return name


def check_names(grid: SweepGrid) -> tuple[dict[str, str], dict[str, str]]:
    """Load every model and profile once, so a typo fails the sweep at once with the allowed names
    instead of filling the table with errors. Returns the load references by grid name."""
    models, profiles = {}, {}
    for name in grid.models:
        models[name] = name if name in PRESETS else _ref(name, grid.base_dir, (".json",))
        load_model_shape(models[name])
    for name in grid.hardware:
        profiles[name] = _ref(name, grid.base_dir, (".yaml", ".yml"))
        load_profile(profiles[name])
    return models, profiles


def expand_grid(grid: SweepGrid) -> list[Point]:
    """The cross product, in grid order, without duplicates (a repeated value adds nothing). Each
    point's key is ``point_key`` of its inputs, its text put together from the texts of each
    column's values and of each override setting, made once."""
    model_refs, profile_refs = check_names(grid)
    swept = grid.overrides.swept()
    settings = []  # (overrides, their part of the key's text), per override setting
    for values in itertools.product(*swept.values()):
        chosen = dict(zip(swept, values))
        overrides = tuple((c, chosen.get(c)) for c in OVERRIDE_COLUMNS)
        settings.append((overrides, [_pair_text(c, v) for c, v in overrides if _keyed(c, v)]))
    loads = [(load, [_pair_text(c, dict(load)[c]) for c in SERVING_COLUMNS if c in dict(load)])
             for load in grid.serving.settings()] if grid.serving else [(None, [])]
    axes = (grid.models, grid.hardware, grid.tp, grid.pp, grid.pp_microbatches, grid.batch, grid.prompt_len,
            grid.gen_len, grid.schedules, grid.dtype, grid.kv_cache, grid.kv_reads)  # SCENARIO_COLUMNS' order
    texts = [{v: _pair_text(c, v) if _keyed(c, v) else None for v in values} for c, values in zip(SCENARIO_COLUMNS, axes)]
    points: dict[str, Point] = {}
    for scenario in itertools.product(*axes):
        head = [text for text in (column[v] for column, v in zip(texts, scenario)) if text is not None]
        model, hw, tp, pp, m, batch, prompt_len, gen_len, schedule, dtype, kv_cache, kv_reads = scenario
        for overrides, override_texts in settings:
            for ep in grid.ep or [1]:
                ep_texts = [_pair_text("ep", ep)] if ep != 1 else []
                ep_texts += [_pair_text("dp_attention", True)] if grid.dp_attention else []
                for load, load_texts in loads:
                    text = "[" + ",".join(head + override_texts + ep_texts + load_texts) + "]"
                    key = hashlib.sha256(text.encode()).hexdigest()[:20]
                    if key not in points:
                        point = Point(model, hw, tp, batch, prompt_len, gen_len, schedule, dtype, kv_cache, overrides,
                                      model_refs[model], profile_refs[hw], kv_reads, load, pp, m, ep,
                                      bool(grid.dp_attention))
                        point.__dict__["key"] = key  # (Point.key's cached value: point_key(point.inputs()))
                        points[key] = point
    return list(points.values())
