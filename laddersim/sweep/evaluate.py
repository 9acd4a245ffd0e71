"""Run one sweep point: simulate it and return its result row (inputs, status, error, metrics).

Runs inside worker processes (local pool or Dask workers); loaded models and profiles are cached
per process, so a worker reads each file once however many points it runs.
"""

from __future__ import annotations

from functools import lru_cache

from laddersim.errors import DoesNotFitError, UserInputError
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.model_shape import ModelShape, load_model_shape
from laddersim.serving.sweep_axes import serving_point_metrics
from laddersim.simulate import make_scenario, simulate
from laddersim.sweep.overrides import override_scales
from laddersim.sweep.points import Point

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


@lru_cache(maxsize=256)
def _overridden(ref: str, overrides: tuple[tuple[str, float | None], ...], tp: int) -> HardwareProfile:
    # Grids repeat each override setting across many points. Set values are converted for the
    # point's TP group (the number they replace depends on it).
    profile = _profile(ref)
    scales = override_scales(profile, dict(overrides), tp)
    return with_overrides(profile, **scales) if scales else profile


def simulate_point(point: Point) -> dict:
    """SimResult.summary() of the point; raises UserInputError (incl. DoesNotFitError) if infeasible."""
    profile = _overridden(point.hardware_ref, point.overrides, point.tp)
    if point.serving:  # one replica under load (laddersim.serving.sweep_axes)
        return serving_point_metrics(_model(point.model_ref), profile, point.tp, point.schedule, point.dtype,
                                     point.kv_reads, point.prompt_len, point.gen_len, point.serving, point.pp)
    scenario = make_scenario(_model(point.model_ref), profile, point.tp, point.batch, point.prompt_len,
                             point.gen_len, point.schedule, point.dtype, point.kv_cache,
                             point.kv_reads, pp=point.pp, microbatches=point.pp_microbatches)
    return simulate(scenario).summary()


def evaluate_point(point: Point) -> dict:
    """The point's row: ``key``, input columns, ``status`` (ok | infeasible | error), ``error``
    (message or None) and the metrics (seconds, tokens/s, GiB)."""
    row = {"key": point.key, **point.inputs(), "status": "ok", "error": None}
    inputs = set(row)
    try:
        summary = simulate_point(point)
    except (DoesNotFitError, UserInputError) as exc:  # does not fit, or tp/schedule invalid here
        row.update(status="infeasible", error=str(exc))
        return row
    except Exception as exc:  # noqa: BLE001 - recorded, so one bad point cannot lose a long sweep
        row.update(status="error", error=f"{type(exc).__name__}: {exc}")
        return row
    row.update({k: v for k, v in summary.items() if k not in inputs})
    return row


def evaluate_points(points: list[Point]) -> list[dict]:
    """Rows of a batch of points (one task of a worker)."""
    return [evaluate_point(p) for p in points]
