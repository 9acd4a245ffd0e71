"""The tables of ``kernel_trace.py``: their columns, reading and writing them (whole or not at all),
a point's key, the per-layer summary (two layer counts differenced, by signature and by class,
with laddersim's own count beside it under ``--predict``) and the run's PROVENANCE.md."""

from __future__ import annotations

import collections
import csv
import datetime
import io
import os
import platform
import shlex
import subprocess
from pathlib import Path
from typing import Sequence

import torch

from calibration.trace_kernels import class_totals, kernel_class, per_layer
from laddersim.fitting.run_context import atomic_write

# A point's settings: what was traced. ``phase`` (decode / prefill) and ``mlp`` (fused / split) are
# newer than the first traces: a table without them holds decode steps of the split MLP.
POINT = ("device", "mode", "phase", "sdpa", "mlp", "tp", "schedule", "batch")
OLD_POINT_DEFAULTS = {"phase": "decode", "mlp": "split"}
FIELDS_KERNELS = (*POINT, "layers", "kernel", "kernel_class", "calls_per_step", "us_per_step")
FIELDS_PER_LAYER = (*POINT, "layers_from", "layers_to", "kernel_class", "kernels_per_layer", "us_per_layer",
                    "regular", "model_kernels_per_layer")
FIELDS_LAYER_KERNELS = (*POINT, "kernel", "kernel_class", "calls_per_layer", "us_per_layer")


def point_base(cfg: dict, mode: str, schedule: str, batch: int) -> dict:
    """The ``POINT`` columns of a point of this run."""
    return {"device": cfg["device"], "mode": mode, "phase": cfg["phase"], "sdpa": cfg["variant"].sdpa,
            "mlp": cfg["variant"].mlp, "tp": cfg["tp"], "schedule": schedule, "batch": batch}


def read_table(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def write_table(path: Path, fields: Sequence[str], rows: list[dict]) -> None:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(fields))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, text.getvalue())  # whole or not at all: an interrupted write leaves the last table


def point_key(row: dict) -> tuple:
    """What a row traced (``POINT`` and its layer count), as text; a row of an older table without
    ``phase`` or ``mlp`` reads as what those traced (``OLD_POINT_DEFAULTS``)."""
    return (*(str(row.get(c) or OLD_POINT_DEFAULTS.get(c, "")) for c in POINT), str(row["layers"]))


def provenance(cfg: dict, argv: Sequence[str]) -> str:
    variant = cfg["variant"]
    lines = [f"# Kernel trace: {cfg['shape'].name}, TP {cfg['tp']} shard, {cfg['phase']}, {cfg['dtype']}, "
             f"mlp {variant.mlp}, sdpa {variant.sdpa}",
             "", f"- command: `python calibration/kernel_trace.py {shlex.join(argv)}`",
             f"- date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M')}",
             f"- torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}"]
    if cfg["device"] == "cuda":
        props = torch.cuda.get_device_properties(0)
        lines.append(f"- GPU: {props.name}, {props.multi_processor_count} SMs, CUDA {torch.version.cuda}")
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
            lines.append(f"- driver: {driver[0] if driver else 'not reported'}")
        except (OSError, subprocess.SubprocessError):
            lines.append("- driver: nvidia-smi not available")
    else:
        lines.append(f"- CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
                     "(the CPU twin: Inductor's C++ kernels, CPU time)")
    return "\n".join(lines) + "\n"


def predicted_per_layer(cfg: dict, schedule: str, batch: int) -> dict[str, float]:
    """The kernels laddersim's op program charges one layer (gpt-fast; {} without --predict)."""
    if cfg.get("predict") is None:
        return {}
    from laddersim.costs.kernel_counts import kernels_per_layer
    from laddersim.costs.op_costs import Phase
    from laddersim.model.workload import Workload
    from laddersim.schedules.program import build_program

    if cfg["phase"] == "prefill":
        work = Workload(batch=batch, prompt_len=cfg["prompt_len"], gen_len=1, framework="gpt-fast")
        phase = Phase("prefill", batch, cfg["prompt_len"])
    else:
        work = Workload(batch=batch, prompt_len=max(cfg["pos"], 1), gen_len=1, framework="gpt-fast")
        phase = Phase("decode", batch, 1)
    program = build_program(schedule, cfg["shape"].n_layers, cfg["tp"], phase.name)
    return kernels_per_layer(cfg["shape"], cfg["predict"], work, cfg["tp"], phase, program)


def summarise(out: Path, kernel_rows: list[dict], steps_rows: list[dict], cfg: dict, mode: str) -> list[str]:
    lo, hi = cfg["layers"]
    by_point: dict[tuple, dict[str, tuple[int, float]]] = collections.defaultdict(dict)
    for r in kernel_rows:
        by_point[point_key(r)][r["kernel"]] = (int(r["calls_per_step"]), float(r["us_per_step"]))
    step_of = {point_key(r): float(r["step_us"]) for r in steps_rows}
    layer_rows, class_rows, summary = [], [], []
    for schedule in cfg["schedules"]:
        for batch in cfg["batches"]:
            base = point_base(cfg, mode, schedule, batch)
            keys = [point_key({**base, "layers": n}) for n in (lo, hi)]
            if not all(k in step_of for k in keys):
                continue
            one, regular = per_layer(by_point[keys[0]], by_point[keys[1]], hi - lo)
            layer_rows += [{**base, "kernel": k, "kernel_class": kernel_class(k), "calls_per_layer": round(c, 3),
                            "us_per_layer": round(u, 3)} for k, (c, u) in one.items()]
            totals = class_totals(one)
            model = predicted_per_layer(cfg, schedule, batch)
            for cls, (calls, us) in totals.items():
                class_rows.append({**base, "layers_from": lo, "layers_to": hi, "kernel_class": cls,
                                   "kernels_per_layer": round(calls, 3), "us_per_layer": round(us, 3),
                                   "regular": regular, "model_kernels_per_layer": model.get(cls, "")})
            step_us = (step_of[keys[1]] - step_of[keys[0]]) / (hi - lo)
            class_rows.append({**base, "layers_from": lo, "layers_to": hi, "kernel_class": "step (wall clock)",
                               "kernels_per_layer": "", "us_per_layer": round(step_us, 3), "regular": regular})
            count = sum(c for c, _ in totals.values())
            parts = ", ".join(f"{c:g} {cls}" for cls, (c, _) in totals.items() if c)
            said = (f"; laddersim {sum(model.values()):g} ("
                    + ", ".join(f"{c:g} {cls}" for cls, c in model.items() if c) + ")") if model else ""
            summary.append(f"{schedule} b{batch}: {count:g} kernels/layer ({parts}){'' if regular else ' IRREGULAR'}, "
                           f"{step_us:.1f} us/layer{said}")
    write_table(out / "per_layer.csv", FIELDS_PER_LAYER, class_rows)
    write_table(out / "layer_kernels.csv", FIELDS_LAYER_KERNELS, layer_rows)
    return summary
