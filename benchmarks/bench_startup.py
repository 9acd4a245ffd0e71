"""Start-up cost of a trivial ``laddersim simulate`` against the bare imports it cannot avoid.

Runs, interleaved and ``--repeats`` times each, the reference process
``python -c "import numpy, yaml, pydantic, simpy"`` and ``python -m laddersim simulate`` of a tiny
scenario, and prints the best CPU seconds (user + system) of each and their ratio (goal: within
3x). Both run in the same moment on the same machine, so the ratio holds on a busy machine where
the seconds do not. Also prints which heavy libraries the simulate process imported.

    python benchmarks/bench_startup.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys

REFERENCE = [sys.executable, "-c", "import numpy, yaml, pydantic, simpy"]
SIMULATE = [sys.executable, "-m", "laddersim", "simulate", "--model", "llama-3.1-8b", "--hardware",
            "h100-sxm-nvswitch", "--tp", "2", "--prompt-len", "128", "--gen-len", "8", "--schedule", "standard"]
HEAVY = ("pandas", "matplotlib", "scipy", "torch", "pyarrow", "dask")


def cpu_s(command: list[str]) -> float:
    """CPU seconds (user + system) of one run of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    ref, sim = [], []
    for _ in range(args.repeats):
        ref.append(cpu_s(REFERENCE))
        sim.append(cpu_s(SIMULATE))
    probe = ("import runpy, sys; sys.argv = ['laddersim'] + sys.argv[1:]; "
             "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n"
             "    try: runpy.run_module('laddersim', run_name='__main__')\n    except SystemExit: pass\n"
             f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules) or 'none')")
    loaded = subprocess.run([sys.executable, "-c", probe, *SIMULATE[3:]], capture_output=True, text=True,
                            env={**os.environ}).stdout.strip()
    print(f"reference (import numpy, yaml, pydantic, simpy): {min(ref):.3f} s CPU (best of {args.repeats})")
    print(f"laddersim simulate (8b tp 2, 128 + 8 tokens):    {min(sim):.3f} s CPU (best of {args.repeats})")
    print(f"ratio: {min(sim) / min(ref):.2f}x (goal: within 3x)")
    print(f"heavy libraries imported by simulate: {loaded}")


if __name__ == "__main__":
    main()
