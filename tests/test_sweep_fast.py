"""Issue 40's sweep: the table of a grid like the 100,000-point one (smaller here), row by row
against each point simulated alone on the SimPy engine; and the pieces made faster for it (point
keys, the store, the table, the plain table reader), each against what it replaced."""

from __future__ import annotations

import csv
import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.errors import UserInputError
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.profile import load_profile, profiles_dir
from laddersim.hardware.table_files import read_plain_columns
from laddersim.simulation.simulate import SimOptions, make_scenario, simulate
from laddersim.sweeps.evaluate import METRIC_COLUMNS
from laddersim.sweeps.grid import OVERRIDE_COLUMNS, load_grid, parse_grid
from laddersim.sweeps.points import INPUT_COLUMNS, KEYED_UNLESS, expand_grid, point_key
from laddersim.sweeps.runner import batches
from laddersim.sweeps.sweep_dir import run_sweep
from laddersim.sweeps.store import SweepStore
from laddersim.sweeps.table import column_types, results_frame

# Issue 40's grid with fewer values on each axis (its every schedule, both models, several machines,
# a TP each models cannot hold, batches, bandwidth and latency scales).
GRID = {
    "models": ["llama-3.1-8b", "llama-3.1-70b"],
    "hardware": ["h100-sxm-nvswitch", "a100-sxm-nvswitch", "h100-sxm-p2p-off"],
    "tp": [1, 2, 8], "batch": [1, 16], "prompt_len": [256], "gen_len": [24],
    "schedules": ["standard", "parallel", "ladder", "upper_bound", "desync_half"],
    "kv_cache": ["static", "dynamic"],
    "overrides": {"intra_bandwidth_scale": [0.1, 1.0, 3.0], "intra_latency_scale": [0.5, 2.0]},
}


@lru_cache(maxsize=1)
def _table(tmp: str = "") -> pd.DataFrame:
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        report = run_sweep(parse_grid(GRID), Path(out) / "sweep", workers=1, progress=False)
        assert report.points == report.computed == len(report.frame) == 2 * 3 * 3 * 2 * 5 * 2 * 6
        return report.frame


def _alone(row: pd.Series) -> dict:
    """The row's point simulated alone, every run on the SimPy engine."""
    profile = with_overrides(load_profile(row["hardware"]), intra_bandwidth_scale=row["intra_bandwidth_scale"],
                             intra_latency_scale=row["intra_latency_scale"])
    scenario = make_scenario(model=row["model"], hardware=profile, tp=int(row["tp"]), batch=int(row["batch"]),
                             prompt_len=int(row["prompt_len"]), gen_len=int(row["gen_len"]), schedule=row["schedule"],
                             dtype=row["dtype"], kv_cache=row["kv_cache"], kv_reads=row["kv_reads"])
    return simulate(scenario, SimOptions(replay=False, reference=True)).summary()


def _assert_is_its_point_alone(row: pd.Series) -> None:
    """The sweep's row is its point simulated alone: the same metrics, or the same one-line error."""
    try:
        alone = _alone(row)
    except UserInputError as exc:  # (does not fit, or a TP the model cannot take)
        assert row["status"] == "infeasible" and row["error"] == str(exc)
        return
    assert row["status"] == "ok"
    for column in METRIC_COLUMNS:
        assert row[column] == alone[column], column
    if row["schedule"] == "standard":
        assert row["speedup_vs_standard"] == 1.0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2 * 3 * 3 * 2 * 5 * 2 * 6 - 1))
def test_a_sweeps_rows_are_their_points_simulated_alone(index):
    _assert_is_its_point_alone(_table().iloc[index])


def test_a_sweeps_batches_keep_one_program_each():
    points = expand_grid(parse_grid(GRID))
    tasks = batches(points, 2)
    assert sorted(p.key for t in tasks for p in t) == sorted(p.key for p in points)
    assert all(len({(p.model, p.schedule) for p in task}) == 1 for task in tasks)


def test_a_workers_share_is_taken_part_by_part():
    """Each task once; a model's tasks before the next model's; the i-th tasks of a model's
    programs together (the same scenarios, schedule by schedule, in program order)."""
    from laddersim.sweeps.runner import by_part

    points = expand_grid(parse_grid(GRID))
    tasks = batches(points, 4)  # (four tasks per program)
    ordered = by_part(tasks)
    assert sorted(map(id, ordered)) == sorted(map(id, tasks))
    models = [t[0].model for t in ordered]
    assert models == sorted(models, key=[t[0].model for t in tasks].index)
    schedules = list(dict.fromkeys(GRID["schedules"]))
    for model in GRID["models"]:
        mine = [t for t in ordered if t[0].model == model]
        parts = len(mine) // len(schedules)
        assert parts > 1 and len(mine) == parts * len(schedules)
        for i in range(parts):
            run = mine[i * len(schedules):(i + 1) * len(schedules)]
            assert [t[0].schedule for t in run] == schedules
            scenarios = {tuple((p.hardware, p.tp, p.batch, p.kv_cache, p.overrides) for p in t) for t in run}
            assert len(scenarios) == 1


def test_a_batch_pauses_the_garbage_collector_and_leaves_it_as_it_was():
    """evaluate_points runs a batch with the cyclic collector paused (its rows each point's own
    evaluate_point row) and leaves the collector enabled or disabled, as it found it."""
    import gc

    from laddersim.sweeps import evaluate

    points = expand_grid(parse_grid({**GRID, "models": ["llama-3.1-8b"], "hardware": ["h100-sxm-nvswitch"],
                                     "tp": [1, 2], "batch": [1], "kv_cache": ["static"]}))
    seen = []
    inner = evaluate._evaluate_points
    try:
        evaluate._evaluate_points = lambda batch: seen.append(gc.isenabled()) or inner(batch)
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            rows = evaluate.evaluate_points(points)
            assert gc.isenabled() is enabled
        assert seen == [False, False]
    finally:
        evaluate._evaluate_points = inner
        gc.enable()
    assert rows == [evaluate.evaluate_point(p) for p in points]


def test_the_collector_is_paused_for_a_block_and_left_as_it_was():
    import gc

    from laddersim.support.collector import collector_paused

    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            with collector_paused():
                assert not gc.isenabled()
                with collector_paused():  # (nested: still paused after the inner block)
                    pass
                assert not gc.isenabled()
            assert gc.isenabled() is enabled
        gc.enable()
        try:
            with collector_paused():
                raise KeyError("x")
        except KeyError:
            pass
        assert gc.isenabled()
    finally:
        gc.enable()


# -- point keys --------------------------------------------------------------------------------
def _json_key(inputs: dict) -> str:
    from laddersim.traffic.sweep_axes import SERVING_COLUMNS

    text = json.dumps([[c, inputs[c]] for c in INPUT_COLUMNS
                       if c not in KEYED_UNLESS or inputs[c] not in (None, KEYED_UNLESS[c])]
                      + [[c, inputs[c]] for c in SERVING_COLUMNS if c in inputs], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


VALUES = st.sampled_from([None, 0, 1, 1.0, 0.0, -0.0, True, False, 2.5, float("nan"), float("inf"), "a\"b", "é", 1e300])


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({c: VALUES for c in INPUT_COLUMNS}))
def test_point_keys_are_the_json_of_their_inputs(inputs):
    assert point_key(inputs) == _json_key(inputs)


def test_expanded_points_carry_their_keys():
    grid = dict(GRID, overrides={"intra_bandwidth_scale": [0.5, 0.5, 2], "gpus_per_node": [4, 8]}, tp=[2, 2, 4],
                pp=[1, 2], pp_microbatches=[1, 2])
    points = expand_grid(parse_grid(grid))
    assert len({p.key for p in points}) == len(points)
    assert all(p.key == _json_key(p.inputs()) for p in points)


# -- the store and the table -------------------------------------------------------------------
def test_the_store_reads_back_what_it_kept(tmp_path):
    rows = [{"key": "a", "x": 0.1, "y": None, "z": "s", "n": 3, "b": True},
            {"key": "b", "x": np.float64(1e-300), "w": [1.5, 2.0]},  # not plain: kept as read back
            {"key": "a", "x": 9.0}]  # a key seen again keeps its first row
    with SweepStore(tmp_path) as store:
        store.add_many(rows)
        kept = dict(store.rows)
    with SweepStore(tmp_path) as again:
        assert again.rows == kept
    assert kept["a"]["x"] == 0.1 and type(kept["b"]["x"]) is float and kept["b"]["w"] == [1.5, 2.0]


def _table_as_before(rows: list[dict]) -> pd.DataFrame:
    """results_frame as it was: a speedup per row from a dict of the standard rows, then a frame
    of records."""
    def norm(v):
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v
    rows = [dict(r) for r in rows]
    key = [c for c in INPUT_COLUMNS if c != "schedule"]
    standard = {tuple(norm(r[c]) for c in key): r["tokens_per_s"] for r in rows
                if r["schedule"] == "standard" and r["status"] == "ok"}
    for r in rows:
        base = standard.get(tuple(norm(r[c]) for c in key))
        r["speedup_vs_standard"] = r["tokens_per_s"] / base if base and r["status"] == "ok" else None
    extra = sorted({k for r in rows for k in r} - set(INPUT_COLUMNS) - set(METRIC_COLUMNS)
                   - {"key", "status", "error", "speedup_vs_standard"})
    columns = list(INPUT_COLUMNS) + ["status", "error"] + list(METRIC_COLUMNS) + extra + ["speedup_vs_standard"]
    frame = pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=columns)
    return frame.astype(column_types()).sort_values(list(INPUT_COLUMNS), na_position="first", kind="mergesort") \
        .reset_index(drop=True)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["standard", "ladder"]), st.sampled_from([1, 2]),
                          st.sampled_from([None, float("nan"), 0.5]), st.sampled_from(["ok", "infeasible"]),
                          st.floats(1.0, 1e4), st.booleans()), max_size=30))
def test_the_table_is_built_as_before(drawn):
    rows = []
    for i, (schedule, batch, scale, status, tokens, extra) in enumerate(drawn):
        row = {"key": str(i), "model": "m", "hardware": "h", "tp": 2, "pp": 1, "pp_microbatches": 1, "batch": batch,
               "prompt_len": 8, "gen_len": 4,
               "schedule": schedule, "dtype": "bfloat16", "kv_cache": "static", "kv_reads": "repeat_interleave",
               **{c: None for c in OVERRIDE_COLUMNS}, "intra_bandwidth_scale": scale, "status": status,
               "error": None if status == "ok" else "no", **{c: None for c in METRIC_COLUMNS}}
        if status == "ok":
            row.update({c: float(tokens) for c in METRIC_COLUMNS}, nodes=1)
        if extra:
            row["framework"] = "gpt-fast"
        rows.append(row)
    got, expected = results_frame(rows), _table_as_before(rows)
    pd.testing.assert_frame_equal(got, expected)
    assert got.to_csv(index=False) == expected.to_csv(index=False)


def _drawn_frame(drawn) -> pd.DataFrame:
    rows = []
    for i, (schedule, batch, error, tokens) in enumerate(drawn):
        rows.append({"key": str(i), "model": "m", "hardware": "h", "tp": 2, "pp": 1, "pp_microbatches": 1,
                     "batch": batch, "prompt_len": 8, "gen_len": 4, "schedule": schedule, "dtype": "bfloat16",
                     "kv_cache": "static", "kv_reads": "repeat_interleave", **{c: None for c in OVERRIDE_COLUMNS},
                     "status": "ok" if error is None else "error", "error": error,
                     **{c: (None if error else tokens * (j + 1)) for j, c in enumerate(METRIC_COLUMNS)},
                     "nodes": None if error else 1})
    return results_frame(rows)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["standard", "ladder"]), st.integers(1, 64),
                          st.sampled_from([None, "no", 'a "quoted", two-part\nmessage']), st.floats(1e-9, 1e4)),
                min_size=1, max_size=40), st.booleans())
def test_a_long_tables_csv_written_in_two_halves_is_the_whole_tables(tmp_path_factory, drawn, split):
    """The CSV of a table long enough to be split (here: every table) is ``to_csv`` of the whole,
    byte for byte, and its Parquet file the table."""
    from laddersim.sweeps import table

    frame = _drawn_frame(drawn)
    out = tmp_path_factory.mktemp("table")
    before, table.CSV_SPLIT_ROWS = table.CSV_SPLIT_ROWS, 1 if split else 10**9
    try:
        parquet, csv_path = table.write_results(frame, out)
    finally:
        table.CSV_SPLIT_ROWS = before
    assert csv_path.read_bytes() == frame.to_csv(index=False, lineterminator="\n").encode()
    pd.testing.assert_frame_equal(pd.read_parquet(parquet), frame)
    assert sorted(p.name for p in out.iterdir()) == ["results.csv", "results.parquet"]  # no part left


def test_a_split_csv_whose_forked_half_failed_is_written_whole(tmp_path, monkeypatch):
    from laddersim.sweeps import table

    frame = _drawn_frame([("standard", b, None, 1.5 * b) for b in range(1, 30)])
    monkeypatch.setattr(table, "CSV_SPLIT_ROWS", 1)
    monkeypatch.setattr(table, "_csv_rows", _fail_in_child(table._csv_rows))
    _, csv_path = table.write_results(frame, tmp_path)
    assert csv_path.read_bytes() == frame.to_csv(index=False, lineterminator="\n").encode()


def _fail_in_child(write):
    import os

    parent = os.getpid()

    def rows(frame, path):
        if os.getpid() != parent:  # the forked process dies before writing
            os._exit(3)
        write(frame, path)
    return rows


# -- the plain table reader --------------------------------------------------------------------
def _csv_columns(path: Path, names: tuple[str, ...]) -> np.ndarray:
    with open(path, newline="") as handle:
        rows = list(csv.reader(line for line in handle if line.strip() and not line.startswith("#")))
    index = [rows[0].index(name) for name in names]
    return np.array([[float(row[i]) for i in index] for row in rows[1:]], dtype=float).reshape(-1, len(names))


def test_the_plain_reader_reads_every_shipped_table_as_the_csv_module_does():
    checked = 0
    for path in sorted((profiles_dir() / "tables").glob("*.csv")):
        with open(path) as handle:
            header = next(line for line in handle if not line.startswith("#")).strip().split(",")
        names = tuple(h for h in header if h in ("m", "n", "k", "time_us", "gpus", "nodes", "size_bytes"))
        if names:
            got = read_plain_columns(path, names)
            assert got is not None and got.tobytes() == _csv_columns(path, names).tobytes(), path.name
            checked += 1
    assert checked >= 30


def test_the_plain_reader_takes_text_columns_and_refuses_what_is_not_a_number(tmp_path):
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("# a comment\nname,gpus,time_us\nx,2,1.5\ny,4,2.25e1\n")
    assert read_plain_columns(mixed, ("gpus", "time_us")).tolist() == [[2.0, 1.5], [4.0, 22.5]]
    broken = tmp_path / "broken.csv"
    broken.write_text("gpus,time_us\n2,1.5\n4,fast\n")
    assert read_plain_columns(broken, ("gpus", "time_us")) is None
    odd = tmp_path / "odd.csv"
    odd.write_text("gpus,time_us\n2,1..5\n")
    assert read_plain_columns(odd, ("gpus", "time_us")) is None


# Issue 40's grid itself, as shipped (benchmarks/bench_figures.py times it): 2 models x 5 machines x
# 4 TPs x 10 batches x 10 bandwidth x 5 latency scales x 5 schedules.
ISSUE_GRID = Path(__file__).resolve().parent.parent / "examples" / "sweep_every_machine.yaml"


@lru_cache(maxsize=1)
def _issue_table() -> pd.DataFrame:
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        report = run_sweep(load_grid(ISSUE_GRID), Path(out) / "sweep", workers=2, progress=False)
        assert report.points == report.computed == len(report.frame) == 100_000
        return report.frame


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 100_000 - 1))
def test_the_100000_point_sweeps_rows_are_their_points_simulated_alone(index):
    """The whole 100,000-point table of issue 40 (two workers, the fast path), a drawn row at a time
    against its point simulated alone on the SimPy engine."""
    _assert_is_its_point_alone(_issue_table().iloc[index])
