"""Run sweep points: simulate them and return their result rows (inputs, status, error, metrics).

Runs inside worker processes (local pool or Dask workers); loaded models and profiles are cached
per process, so a worker reads each file once however many points it runs. The points of a batch
are simulated together (``laddersim.simulation.many``: the runs of one program replayed in one walk
of its event-order tree), bit for bit as one by one.
"""

from __future__ import annotations

from functools import lru_cache

from laddersim.support.collector import collector_paused
from laddersim.errors import DoesNotFitError, UserInputError
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.model.shape import ModelShape, load_model_shape
from laddersim.traffic.sweep_axes import serving_point_metrics
from laddersim.simulation.simulate import Scenario, make_scenario, simulate
from laddersim.simulation.many import summaries_many
from laddersim.sweeps.overrides import override_scales
from laddersim.sweeps.points import Point

# Metrics of every row, in table order (SimResult.summary() keys that are not inputs); a row that
# did not simulate has them empty. Any further summary keys are appended after these.
METRIC_COLUMNS = (
    "nodes", "prefill_s", "decode_s", "total_s", "tokens_per_s", "ttft_s", "tpot_s", "decode_step_s",
    "compute_s", "overhead_s", "comm_s", "exposed_comm_s", "memory_per_gpu_gib",
)
STATUSES = ("ok", "infeasible", "error")


@lru_cache(maxsize=64)
def _profile(ref: str) -> HardwareProfile:
    return load_profile(ref)


@lru_cache(maxsize=64)
def _model(ref: str) -> ModelShape:
    return load_model_shape(ref)


@lru_cache(maxsize=4096)
def _overridden(ref: str, overrides: tuple[tuple[str, float | None], ...], tp: int) -> HardwareProfile:
    # Grids repeat each override setting across many points (a batch of one program holds every
    # machine x TP x override setting of a grid like examples/sweep_every_machine.yaml: a few
    # thousand). Set values are
    # converted for the point's TP group (the number they replace depends on it).
    profile = _profile(ref)
    scales = override_scales(profile, dict(overrides), tp)
    return with_overrides(profile, **scales) if scales else profile


def _scenario(point: Point) -> Scenario:
    """The point's scenario (its profile with the point's overrides); raises UserInputError
    (incl. DoesNotFitError) if infeasible."""
    profile = _overridden(point.hardware_ref, point.overrides, point.tp)
    return make_scenario(model=_model(point.model_ref), hardware=profile, tp=point.tp, batch=point.batch,
                         prompt_len=point.prompt_len, gen_len=point.gen_len, schedule=point.schedule, dtype=point.dtype,
                         kv_cache=point.kv_cache, kv_reads=point.kv_reads, pp=point.pp,
                         microbatches=point.pp_microbatches, ep=point.ep, dp_attention=point.dp_attention)


def simulate_point(point: Point) -> dict:
    """SimResult.summary() of the point; raises UserInputError (incl. DoesNotFitError) if infeasible."""
    if point.serving:  # one replica under load (laddersim.traffic.sweep_axes)
        profile = _overridden(point.hardware_ref, point.overrides, point.tp)
        return serving_point_metrics(_model(point.model_ref), profile, point.tp, point.schedule, point.dtype,
                                     point.kv_reads, point.prompt_len, point.gen_len, point.serving, point.pp)
    return simulate(_scenario(point)).summary()


def _row(point: Point, outcome) -> dict:
    """The point's row from its summary, or from the exception that stopped it."""
    row = {"key": point.key, **point.inputs(), "status": "ok", "error": None}
    if isinstance(outcome, (DoesNotFitError, UserInputError)):  # does not fit, or tp/schedule invalid here
        row.update(status="infeasible", error=str(outcome))
    elif isinstance(outcome, Exception):  # recorded, so one bad point cannot lose a long sweep
        row.update(status="error", error=f"{type(outcome).__name__}: {outcome}")
    else:
        inputs = set(row)
        row.update({k: v for k, v in outcome.items() if k not in inputs})
    return row


def evaluate_point(point: Point) -> dict:
    """The point's row: ``key``, input columns, ``status`` (ok | infeasible | error), ``error``
    (message or None) and the metrics (seconds, tokens/s, GiB)."""
    try:
        return _row(point, simulate_point(point))
    except Exception as exc:  # noqa: BLE001 - classified by _row
        return _row(point, exc)


def evaluate_points(points: list[Point]) -> list[dict]:
    """Rows of a batch of points (one task of a worker), as ``evaluate_point`` of each; the
    simulations of the batch run together (``laddersim.simulation.many.summaries_many``).

    Python's cyclic garbage collector is paused while the batch runs (``laddersim.support.collector``: a
    batch makes few reference cycles but many objects that live on, the programs' event-order
    trees and the costs kept for the next schedules; examples/sweep_every_machine.yaml's grid: 13
    full collections of a worker's ~600 MB, a sixth of its CPU; 3 paused)."""
    with collector_paused():
        return _evaluate_points(points)


def _evaluate_points(points: list[Point]) -> list[dict]:
    rows: list[dict | None] = [None] * len(points)
    scenarios, where = [], []
    for i, point in enumerate(points):
        if point.serving:
            rows[i] = evaluate_point(point)
            continue
        try:
            scenarios.append(_scenario(point))
            where.append(i)
        except Exception as exc:  # noqa: BLE001 - classified by _row
            rows[i] = _row(point, exc)
    for i, summary in zip(where, summaries_many(scenarios)):
        rows[i] = _row(points[i], summary)
    return rows
