"""The five speed figures in one run: each figure in seconds and as a ratio to the reference process.

The reference process is ``python -c "import numpy, yaml, pydantic, simpy"`` (the imports no
laddersim command can avoid), timed in the same run as the figures (best of ``--repeats``), so
the ratios hold on a machine others share where the seconds do not. Its cost is its CPU seconds
(user + system): its wall seconds are fewer on an idle machine, where numpy's BLAS threads start
on another core while the imports go on (laddersim's commands run BLAS on one thread). A figure's
ratio is its wall seconds (what the user waits) over the reference's CPU seconds, as the project's
table has them (203 s / 911 = 0.22 s); its CPU seconds over the reference's follow. Every figure
is the command a user types, run as a subprocess of this one, from a fresh interpreter:

* ``startup``: ``laddersim simulate`` of a tiny case (8B, TP 2, 128 + 8 tokens, standard), best of
  ``--repeats`` (goal <= 1.5x);
* ``stragglers``: ``laddersim simulate`` of 405B at TP 16, batch 16, 1024 + 512 tokens with
  ``--jitter 0.05`` (every rank simulated; standard and ladder), its seconds beyond the start-up
  figure (goal <= 10x);
* ``sweep``: ``laddersim sweep`` of the 100,000-point grid ``examples/sweep_every_machine.yaml``
  with ``--workers 2`` into an empty folder (goal <= 150x);
* ``serving``: ``laddersim serving`` of 1,000,000 requests (70B TP 8 ladder on h100-sxm-nvswitch,
  50 req/s, 512 + 128 tokens), with its peak memory (goal <= 100x, <= 1.5 GB);
* ``plan``: ``laddersim plan --model llama-3.1-70b --rate 20 --ttft-slo-s 0.5 --tpot-slo-s 0.05
  --prompt-len 512 --gen-len 128``, in seconds (goal <= 15 s).

Each line gives wall seconds and CPU seconds (user + system of the command and its worker
processes), and the machine's load average before and after the run, since wall seconds on a
shared machine stretch with its load.

Every process, the reference's too, runs with its modules' bytecode cached (in a temporary
``PYTHONPYCACHEPREFIX``, filled by a first run of the reference, the start-up command and, where
the sweep is measured, a 4-point sweep on 2 workers), as an installed package runs:
pip compiles a wheel's modules when it installs it, and numpy, yaml, pydantic and simpy come so.
This checkout's environment sets ``PYTHONDONTWRITEBYTECODE``, under which an editable install
compiles every laddersim module at every start; ``--as-is`` measures that way instead (the
start-up figure also prints it).

    python benchmarks/bench_figures.py [--only startup stragglers sweep serving plan] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REFERENCE = [sys.executable, "-c", "import numpy, yaml, pydantic, simpy"]
LADDERSIM = [sys.executable, "-m", "laddersim"]
STARTUP = [*LADDERSIM, "simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
           "--prompt-len", "128", "--gen-len", "8", "--schedule", "standard"]
STRAGGLERS = [*LADDERSIM, "simulate", "--model", "llama-3.1-405b", "--hardware", "h100-sxm-nvswitch", "--tp", "16",
              "--batch", "16", "--prompt-len", "1024", "--gen-len", "512", "--jitter", "0.05"]
GRID = Path(__file__).resolve().parent.parent / "examples" / "sweep_every_machine.yaml"  # the 100,000-point grid
SERVING = [*LADDERSIM, "serving", "--model", "llama-3.1-70b", "--hardware", "h100-sxm-nvswitch", "--tp", "8",
           "--schedule", "ladder", "--rate", "50", "--requests", "1000000", "--prompt-len", "512", "--gen-len", "128",
           "--no-progress"]
PLAN = [*LADDERSIM, "plan", "--model", "llama-3.1-70b", "--rate", "20", "--ttft-slo-s", "0.5", "--tpot-slo-s",
        "0.05", "--prompt-len", "512", "--gen-len", "128", "--no-progress"]
FIGURES = ("startup", "stragglers", "sweep", "serving", "plan")


ENV = dict(os.environ)  # the environment the commands run in (main() may cache bytecode in it)


def run(command: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """(wall s, CPU s, peak resident MB) of one run of ``command`` and its children."""
    t0 = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or ENV)
    # wait4 gives this child's own rusage (its waited-for workers included), not our other children's.
    _, status, usage = os.wait4(process.pid, 0)
    wall_s = time.perf_counter() - t0
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:])} failed ({process.returncode}):\n{stderr[-2000:]}")
    return wall_s, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def best(command: list[str], repeats: int, env: dict | None = None) -> tuple[float, float, float]:
    runs = [run(command, env) for _ in range(repeats)]
    return min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)


def line(name: str, wall_s: float, cpu_s: float, ref_cpu_s: float, goal: str, extra: str = "",
         ref_wall_s: float | None = None) -> str:
    """The figure's line: its wall and CPU seconds over the reference's CPU seconds (the issue's
    accounting), and its wall over the reference's wall where given (a stricter reading on an idle
    machine, where the reference's spare core runs numpy's BLAS threads: printed, not the goal)."""
    strict = f"; {wall_s / ref_wall_s:.1f}x the reference's wall" if ref_wall_s else ""
    return (f"{name:<11} {wall_s:8.2f} s wall ({wall_s / ref_cpu_s:6.1f}x ref), {cpu_s:8.2f} s CPU "
            f"({cpu_s / ref_cpu_s:6.1f}x ref); goal {goal}{extra}{strict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=FIGURES, default=list(FIGURES), help="figures to run")
    parser.add_argument("--repeats", type=int, default=5, help="runs of the reference and the start-up (best)")
    parser.add_argument("--as-is", action="store_true", help="no bytecode cache (as this environment runs)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} before the run")
    as_is = dict(os.environ)
    cache = tempfile.TemporaryDirectory()
    if not args.as_is:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        ENV["PYTHONPYCACHEPREFIX"] = cache.name
        for command in (REFERENCE, STARTUP):  # the first runs write the bytecode
            run(command)
        if "sweep" in args.only:  # (and a sweep's own modules: the table's writers, the worker pool)
            with tempfile.TemporaryDirectory() as tmp:
                run([*LADDERSIM, "sweep", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "1",
                     "2", "--prompt-len", "64", "--gen-len", "4", "--workers", "2", "--no-progress", "--out",
                     str(Path(tmp) / "out")])
    print(f"bytecode: {'as this environment runs' if args.as_is else 'cached, as an installed package runs'}")
    ref_wall, ref, _ = best(REFERENCE, args.repeats)
    print(f"{'reference':<11} {ref:8.3f} s CPU, {ref_wall:.3f} s wall (import numpy, yaml, pydantic, simpy; "
          f"best of {args.repeats}); ratios are to its CPU seconds")
    startup = None
    if "startup" in args.only or "stragglers" in args.only:
        startup = best(STARTUP, args.repeats)
        if "startup" in args.only:
            print(line("startup", startup[0], startup[1], ref, "<= 1.5x", f" (best of {args.repeats})", ref_wall))
            if not args.as_is:
                ref_as_is, raw = best(REFERENCE, args.repeats, as_is)[1], best(STARTUP, args.repeats, as_is)
                print(f"{'':<11} without the bytecode cache: {raw[0]:.2f} s wall, {raw[1]:.2f} s CPU "
                      f"({raw[1] / ref_as_is:.1f}x the reference's {ref_as_is:.3f} s CPU, it too without)")
    if "stragglers" in args.only:
        wall_s, cpu_s, _ = run(STRAGGLERS)
        print(line("stragglers", wall_s - startup[0], cpu_s - startup[1], ref, "<= 10x",
                   f" (beyond start-up; the whole command {wall_s:.2f} s)", ref_wall))
    if "sweep" in args.only:
        with tempfile.TemporaryDirectory() as tmp:
            wall_s, cpu_s, peak_mb = run([*LADDERSIM, "sweep", str(GRID), "--out", str(Path(tmp) / "out"), "--workers",
                                          "2", "--no-progress"])
        print(line("sweep", wall_s, cpu_s, ref, "<= 150x", f" (100,000 points, 2 workers, {100_000 / wall_s:.0f} "
                   f"points/s; CPU per worker {cpu_s / 2 / ref:.0f}x ref; peak memory of a process {peak_mb:.0f} MB)",
                   ref_wall))
    if "serving" in args.only:
        wall_s, cpu_s, peak_mb = run(SERVING)
        print(line("serving", wall_s, cpu_s, ref, "<= 100x, <= 1.5 GB", f"; peak memory {peak_mb:.0f} MB", ref_wall))
    if "plan" in args.only:
        wall_s, cpu_s, _ = run(PLAN)
        print(f"{'plan':<11} {wall_s:8.2f} s wall, {cpu_s:8.2f} s CPU; goal <= 15 s")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} after the run")
    cache.cleanup()


if __name__ == "__main__":
    main()
