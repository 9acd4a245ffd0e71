"""The ``run.json`` manifest: where, on what, with which software and command a run measured.

``describe_host`` imports torch lazily (it is only called from calibration code).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from laddersim.errors import UserInputError
from laddersim.measure.atomic import replace_file
from laddersim.support.config_files import check_numbers
from laddersim.support.io_read import check_tree, read_json
from laddersim.support.limits import MAX_BATCH, MAX_TP

MANIFEST = "run.json"
# Fields that must agree for a re-run to resume into an existing run directory.
RESUME_FIELDS = ("backend", "device", "device_name", "world_size", "ranks_per_node", "nodes")
TEXT_FIELDS = ("backend", "device", "device_name", "cpu_model", "host", "torch", "cuda", "nccl", "driver",
               "date_utc", "command_line", "source")
TEXT_LIST_FIELDS = ("hosts", "modes", "logs", "load_warnings")


def command_line() -> str:
    return shlex.join([Path(sys.argv[0]).name] + sys.argv[1:])


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_total_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _nvidia_driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def describe_host(backend: str, device: str) -> dict:
    """This process's host, device and software (torch imported here, lazily)."""
    import torch

    info = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count() or 1,
        "memory_total_bytes": _memory_total_bytes(),
        "torch": torch.__version__.split("+")[0],
        "torch_build": torch.__version__,
        "cuda": torch.version.cuda or "",
        "nccl": "",
        "driver": "",
        "backend": backend,
        "device": device,
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        nccl = torch.cuda.nccl.version()
        info.update(
            device_name=props.name, device_memory_bytes=int(props.total_memory),
            nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
            driver=_nvidia_driver(),
        )
    else:
        info.update(device_name=f"CPU: {info['cpu_model']}", device_memory_bytes=0)
    return info


def library_name(manifest: dict) -> str:
    if manifest.get("backend") == "nccl":
        return f"NCCL {manifest.get('nccl') or '(version unknown)'}"
    return f"gloo (torch {manifest.get('torch', '?')})"


def read_manifest(run_dir: str | Path) -> dict:
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        raise UserInputError(f"run: {run_dir} has no {MANIFEST}; not a calibration run directory "
                             "(make one with `laddersim calibrate run` or `import-nccl-tests`)")
    manifest = read_json(path, "run")
    check_tree(manifest, f"run: {path}")
    if isinstance(manifest, dict):
        check_numbers(manifest, f"run: {path}")
        for key in ("world_size", "ranks_per_node", "nodes"):  # the run's shape, used in every fit
            value = manifest.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TP):
                raise UserInputError(f"run: {path}: {key} = {value!r}; allowed: an integer from 1 to {MAX_TP}")
        for key in TEXT_FIELDS:  # printed into the fitted profile's description and provenance
            value = manifest.get(key)
            if value is not None and not isinstance(value, str):
                raise UserInputError(f"run: {path}: {key} = {value!r}; allowed: a string")
        for key in TEXT_LIST_FIELDS:
            value = manifest.get(key)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise UserInputError(f"run: {path}: {key} = {value!r}; allowed: a list of strings")
        options = manifest.get("options")  # the run's flags; fits read options.batch and options.quick
        if options is not None and not isinstance(options, dict):
            raise UserInputError(f"run: {path}: options = {options!r}; allowed: a mapping of the run's flags")
        batch = (options or {}).get("batch")
        if batch is not None and not (isinstance(batch, list) and all(
                isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= MAX_BATCH for b in batch)):
            raise UserInputError(f"run: {path}: options.batch = {batch!r}; allowed: a list of integers "
                                 f"from 1 to {MAX_BATCH}")
    if not isinstance(manifest, dict) or "backend" not in manifest:
        raise UserInputError(f"run: {path} is not a laddersim run manifest (no 'backend')")
    return manifest


def write_manifest(run_dir: str | Path, manifest: dict) -> None:
    """Atomic replace (``laddersim.measure.atomic``): a crash or a full disk never leaves half a
    manifest, nor a temporary file."""
    replace_file(Path(run_dir) / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def merge_manifest(run_dir: str | Path, fresh: dict, invocation: dict) -> dict:
    """``fresh`` for a new run; for a resumed one, the first manifest plus this invocation.

    Resuming on a different backend, device or world shape would mix incomparable points: error.
    """
    path = Path(run_dir) / MANIFEST
    if path.exists():
        old = read_manifest(run_dir)
        for field in RESUME_FIELDS:
            if field in old and old[field] != fresh.get(field):
                raise UserInputError(
                    f"out: {run_dir} holds a run with {field}={old[field]!r}, this one has "
                    f"{fresh.get(field)!r}; use a new --out directory")
        manifest = old
    else:
        manifest = dict(fresh)
        manifest["invocations"] = []
    manifest["invocations"] = list(manifest.get("invocations", [])) + [invocation]
    return manifest


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
