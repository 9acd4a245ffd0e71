"""``laddersim calibrate kernels TRACE_DIR``: a framework file for the software stack a one-GPU
kernel trace measured (``calibration/kernel_trace.py``'s output folder).

The single-GPU half of calibration: the trace's ``layer_kernels.csv`` (one layer's kernels, by
signature: a two-layer-count difference) gives, per traced batch, each kernel class's kernels and
device time. Each batch becomes a regime of ``laddersim.model.kernel_calibration``: its linear path
(generated reductions where the layer ran no library GEMM, else library GEMMs) and per class the
bandwidth it achieved over the bytes it streams (the linears' weights, the expanded K/V, or
both), after the class's kernel floors: each traced kernel's own time up to the hardware profile's
floor, and no less than what streaming the bytes at the GPU's datasheet bandwidth leaves
(``class_cost``). Every value cites the trace's file, batch and class. Whether the stack copies a
collective's input on the compute stream comes from the trace too (``collective_input_copy``).
The rest of the framework (cache, K/V reads, collectives) is the ``--base`` framework's; the
collectives are calibrated apart (``calibrate run`` / nccl-tests).

Kernel classes are the trace's own (``kernel_class`` column), except that cuBLAS's Hopper GEMMs
(``nvjet_*``) are library GEMMs (traces that class them ``other`` exist: the public H100 trace).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from laddersim.errors import UserInputError
from laddersim.model.framework import Framework, load_framework
from laddersim.model.kernel_calibration import CLASS_DRIVERS, ClassCost, KernelCalibration, KernelRegime, driver_bytes
from laddersim.model.shape import load_model_shape

LAYER_FILE = "layer_kernels.csv"
COLUMNS = ("tp", "schedule", "batch", "kernel", "kernel_class", "calls_per_layer", "us_per_layer")
CLASSES = ("library_gemm", "splitk_reduce", "generated", "attention", "copy", "other", "collective")
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def kernel_class(name: str, traced: str) -> str:
    """The class of a traced kernel: the trace's, but cuBLAS's ``nvjet`` GEMMs are library GEMMs."""
    if name.lower().startswith("nvjet"):
        return "library_gemm"
    return traced if traced in CLASSES else "other"


def read_layer_kernels(trace_dir: Path) -> pd.DataFrame:
    """The trace's standard-schedule layer kernels, classes fixed; one line, exit 2, if unusable."""
    if not trace_dir.is_dir():
        raise UserInputError(f"trace_dir: {trace_dir} is not a folder; allowed: a calibration/kernel_trace.py --out folder")
    path = trace_dir / LAYER_FILE
    if not path.is_file():
        raise UserInputError(f"trace_dir: {trace_dir} has no {LAYER_FILE}; allowed: a calibration/kernel_trace.py --out folder")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise UserInputError(f"trace_dir: cannot read {path}: {str(exc).strip().splitlines()[0]}") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise UserInputError(f"trace_dir: {path} lacks columns {missing}; required: {', '.join(COLUMNS)}")
    for column in ("tp", "batch", "calls_per_layer", "us_per_layer"):
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.isna().any() or not values.map(math.isfinite).all():
            raise UserInputError(f"trace_dir: {path}: {column} must be a finite number in every row")
        frame[column] = values
    frame = frame[frame["schedule"].astype(str) == "standard"]
    if frame.empty:
        raise UserInputError(f"trace_dir: {path} has no standard-schedule rows; allowed: a trace with --schedule standard")
    if frame["tp"].nunique() != 1 or (frame["batch"] < 1).any() or (frame["batch"] != frame["batch"].round()).any():
        raise UserInputError(f"trace_dir: {path} must hold one TP and whole positive batches")
    frame = frame.copy()
    frame["cls"] = [kernel_class(str(n), str(c)) for n, c in zip(frame["kernel"], frame["kernel_class"])]
    return frame


def _provenance(trace_dir: Path) -> tuple[str, dict]:
    """The trace's command line and what it says (model, max_seq, dtype), from PROVENANCE.md."""
    path = trace_dir / "PROVENANCE.md"
    text = path.read_text(errors="replace") if path.is_file() else ""
    found = {}
    for key, flag in (("model", "--model"), ("max_seq", "--max-seq"), ("dtype", "--dtype")):
        match = re.search(rf"{flag}[ =](\S+)", text)
        if match:
            found[key] = match.group(1).strip("`")
    title = re.search(r"^# Kernel trace: .*?,\s*(bfloat16|float16|float32)\s*(,|$)", text, re.M)
    if title and "dtype" not in found:
        found["dtype"] = title.group(1)
    command = re.search(r"command: `([^`]+)`", text)
    return (command.group(1) if command else "not recorded"), found


def kernel_floor_us(calls: float, us: float, floor_us: float) -> float:
    """One traced kernel signature's floors per layer: its own time, up to ``floor_us`` per call (a
    kernel faster than the profile's floor is all floor; a negative layer difference none)."""
    return max(0.0, min(float(us), max(float(calls), 0.0) * floor_us))


def class_cost(calls: float, us: float, floors: float, driver: str, moved: float, peak_gbps: float,
               where: str, floor_us: float) -> ClassCost:
    """A traced class: ``floors`` (its kernels' floors, ``kernel_floor_us``) and the rest streaming
    ``moved`` bytes, no faster than ``peak_gbps`` (the datasheet: where the rest would need more,
    the bytes stream at the peak and the floors are what is left)."""
    floors = min(floors, max(us, 0.0))
    body_us = us - floors
    bandwidth, detail = None, "the traced time as it is"
    if driver != "fixed" and body_us > 0 and moved > 0:
        capped = moved / (body_us * 1e-6) / 1e9 > peak_gbps and moved / (peak_gbps * 1e3) <= us
        if capped:
            body_us = moved / (peak_gbps * 1e3)
            floors = us - body_us
        bandwidth = round(moved / (body_us * 1e-6) / 1e9, 3)
        detail = (f"{moved / 1e6:.3f} MB of {driver} bytes in {us:.3f} us less {floors:.3f} us of floors ("
                  + (f"what streaming them at the {peak_gbps:g} GB/s datasheet bandwidth leaves of the trace"
                     if capped else f"each kernel's own time up to {floor_us:.2f} us") + ")")
    else:
        driver = "fixed"
    return ClassCost(kernels=calls, us=us, driver=driver, bandwidth_gbps=bandwidth,
                     floor_us=round(floors, 3) if bandwidth else None,
                     source=f"{where}: {calls:g} kernels, {us:.3f} us per layer; {detail}")


def fit_kernels(trace_dir: str | Path, hardware, base: str = "gpt-fast", model: str | None = None,
                max_seq: int | None = None, name: str | None = None) -> Framework:
    """The framework of the traced stack (see the module docstring)."""
    from laddersim.hardware.profile import HardwareProfile, load_profile
    from laddersim.costs.calibrated_kernels import layer_bytes

    trace_dir = Path(trace_dir)
    frame = read_layer_kernels(trace_dir)
    command, said = _provenance(trace_dir)
    model_name = model or said.get("model")
    if not model_name:
        raise UserInputError(f"model: {trace_dir}/PROVENANCE.md names no --model; allowed: pass --model")
    shape = load_model_shape(model_name)
    cache_len = int(max_seq or said.get("max_seq") or 1536)  # kernel_trace.py's default --max-seq
    dtype = said.get("dtype", "bfloat16")
    dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    profile = hardware if isinstance(hardware, HardwareProfile) else load_profile(hardware)
    floor_us = profile.gpu.kernel_launch_s * 1e6
    tp = int(frame["tp"].iloc[0])
    shape.check_tp(tp)
    where = f"{trace_dir.name}/{LAYER_FILE}"
    peak_gbps = profile.gpu.memory_bandwidth_gb_per_s.value
    regimes = []
    for batch, rows in frame.groupby("batch", sort=True):
        batch = int(batch)
        rows = rows.assign(floor=[kernel_floor_us(c, u, floor_us) for c, u in zip(rows["calls_per_layer"],
                                                                                  rows["us_per_layer"])])
        totals = rows.groupby("cls")[["calls_per_layer", "us_per_layer", "floor"]].sum()
        path = "library" if totals.get("calls_per_layer", pd.Series()).get("library_gemm", 0) > 0 else "generated"
        weights, kv = layer_bytes(shape, tp, batch, cache_len, dtype_bytes)
        classes = {}
        for cls, (calls, us, floors) in totals.iterrows():
            driver = CLASS_DRIVERS.get(cls, "fixed")
            if cls == "generated":
                driver = "weights_and_kv" if path == "generated" else "kv"
            classes[cls] = class_cost(round(float(calls), 3), round(float(us), 3), float(floors), driver,
                                      driver_bytes(driver, weights_bytes=weights, kv_bytes=kv), peak_gbps,
                                      f"trace: {where}, batch {batch}, class {cls}", floor_us)
        layer_us = round(sum(c.us for k, c in classes.items() if k != "collective"), 3)
        regimes.append(KernelRegime(batch=batch, linear_path=path, layer_us=layer_us, classes=classes,
                                    source=f"trace: {where}, batch {batch} (standard schedule, TP {tp} shard)"))
    calibration = KernelCalibration(
        trace=str(trace_dir), tp=tp, cache_len=cache_len, dtype_bytes=dtype_bytes, floor_us=round(floor_us, 3),
        regimes=regimes,
        source=f"laddersim calibrate kernels {trace_dir} --hardware {profile.name}; trace command: {command}; "
               f"model {shape.name}, KV cache {cache_len} positions, {dtype}; kernel floor: {profile.name} "
               "gpu.kernel_launch_us")
    base_fw = load_framework(base)
    one_row = next((r for r in regimes if r.batch == 1), None)
    fields = base_fw.model_dump()
    fields.update(
        name=name or f"{base_fw.name}-traced",
        description=f"{base_fw.name} as traced on one GPU ({trace_dir.name}): kernel classes and costs per batch regime",
        kernel_calibration=calibration.model_dump(),
    )
    if one_row is not None:
        fields["single_token_linear"] = {
            "value": one_row.linear_path,
            "source": f"trace: {where}, batch 1: {'no library GEMM, the linears run as generated kernels' if one_row.linear_path == 'generated' else 'library GEMMs'}"}
    fused = [r.batch for r in regimes if "attention" in r.classes and r.classes["attention"].kernels > 0]
    if fused:  # the trace's decode attention is one library kernel (cuDNN/FlashAttention), not the math path
        sdpa = ", ".join(sorted({str(v) for v in frame["sdpa"]})) if "sdpa" in frame.columns else "not recorded"
        fields["decode_attention"] = {"value": "fused", "source": f"trace: {where}: an attention-class kernel at batch "
                                      f"{', '.join(map(str, fused))} (sdpa {sdpa})"}
    fields["collective_input_copy"] = collective_input_copy(frame, where, tp, base_fw)
    splitk = any("splitk_reduce" in r.classes and r.classes["splitk_reduce"].kernels > 0 for r in regimes)
    fields["splitk_reduce_kernel"] = {"value": splitk, "source": f"trace: {where}: "
                                      f"{'splitKreduce kernels in the library-path batches' if splitk else 'no split-K reduce kernel'}"}
    return Framework.model_validate(fields)


def collective_input_copy(frame: pd.DataFrame, where: str, tp: int, base_fw: Framework) -> dict:
    """Does the traced stack copy each collective's input on the compute stream? A TP > 1 trace
    shows it (a copy kernel in the layer or none); a TP 1 trace has no collective, but a compiled
    one (every row ``mode`` compile) writes the input from a generated kernel with the clone fused
    in, as the TP 2 and TP 8 shards of such a stack show (``triton_poi_fused__unsafe_view_add_all_reduce``,
    no copy kernel: reports/kernel_trace/h200_paper_config, torch 2.11); else the base framework's."""
    if tp > 1:
        copies = frame.loc[frame["cls"] == "copy"].groupby("batch")["calls_per_layer"].sum()
        made = bool((copies > 0.5).any())
        return {"value": made, "source": f"trace: {where} (TP {tp} shard): "
                + ("a copy kernel in the layer" if made else "no copy kernel in the layer")}
    modes = set(frame["mode"].astype(str)) if "mode" in frame.columns else set()
    if modes == {"compile"}:
        return {"value": False, "source": f"trace: {where}: a compiled stack (mode compile): Inductor fuses the clone "
                "of a collective's input into the generated kernel writing it (TP 2 and TP 8 traces of such a stack, "
                "reports/kernel_trace/h200_paper_config: triton_poi_fused__unsafe_view_add_all_reduce, no copy kernel)"}
    return base_fw.collective_input_copy.model_dump()


def framework_yaml(fw: Framework) -> str:
    import yaml

    header = ("# Written by laddersim calibrate kernels: a framework file for a traced software stack.\n"
              "# Use it as --framework THIS_FILE.yaml (laddersim kernels, simulate, sweep, ...).\n")
    return header + yaml.safe_dump(fw.model_dump(exclude_none=True), sort_keys=False, width=120)
