"""Seeded fuzzer of every input laddersim reads: mutate a valid seed input, run the command that
reads it in this process (``laddersim.cli.main``), and classify what happened.

    python tools/dev/fuzz_inputs.py --cases 1200 --seed 1          # counts per kind and outcome
    python tools/dev/fuzz_inputs.py --kinds nccl_log --cases 50 --show

Kinds: profile (hardware YAML), hf_config (config.json), measured_csv (validate), nccl_log
(calibrate import-nccl-tests), sweep_grid, prices (plan --prices), run_dir (calibrate fit of a
calibration run), points_jsonl (a sweep store resumed), results_csv (plot), cli_args; and the
serving and planning inputs: serving_args (``serving`` flags: rates, length specs, SLOs, seeds,
arrival shapes, ``--capacity``/``--target-rate`` with a mutated price file), arrival_trace
(``serving --trace``), serving_grid (a sweep grid's ``serving:`` section) and plan_rate
(``plan --rate``).

Outcomes: ``error`` (exit 2, one stderr line ``error: ...``, no traceback) and ``ok`` (exit 0
with finite, positive results) are good; ``traceback`` (an exception escaped), ``multiline``
(exit 2 with more or fewer than one stderr line), ``nonsense`` (exit 0 with non-finite, non-positive
or absurd results, self-contradicting ones such as a capacity below an offered rate that met the
SLOs, or another exit code) and ``hang`` (over the time limit) are failures. ``plan`` exiting 1
with no option ("no configuration meets ...") is an answer, judged ``ok``.
The cases come from tools/dev/fuzz_file_cases.py and tools/dev/fuzz_serving_cases.py (mutations in
tools/dev/fuzz_mutators.py), the verdict on an exit 0 from tools/dev/fuzz_judge.py; this module runs them.
tests/test_fuzz.py draws cases from the same mutators with hypothesis and replays the corpus of
past failures in tests/data/fuzz_corpus/.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import signal
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parents[1]
for _path in (ROOT, TOOLS):  # laddersim, and the fuzzer's other modules beside this one
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from fuzz_file_cases import (  # noqa: E402,F401 - re-exported: tests/test_fuzz.py reads them here
    CORPUS, Case, _cli_case, _grid_case, _hf_case, _measured_case, _nccl_case, _points_case, _prices_case,
    _profile_case, _results_case, _run_dir_case,
)
from fuzz_judge import _finite_positive, _no_constant, _nonsense, _serving_row_nonsense  # noqa: E402,F401
from fuzz_serving_cases import _plan_rate_case, _serving_case, _serving_grid_case, _trace_case  # noqa: E402

from laddersim.cli import main  # noqa: E402

TIME_LIMIT_S = 60

KINDS = {
    "profile": _profile_case, "hf_config": _hf_case, "measured_csv": _measured_case, "nccl_log": _nccl_case,
    "sweep_grid": _grid_case, "prices": _prices_case, "run_dir": _run_dir_case, "points_jsonl": _points_case,
    "results_csv": _results_case, "cli_args": _cli_case,
    "serving_args": _serving_case, "arrival_trace": _trace_case, "serving_grid": _serving_grid_case,
    "plan_rate": _plan_rate_case,
}


def make_case(kind: str, seed: int, value=None) -> Case:
    return KINDS[kind](random.Random(f"{kind}:{seed}"), value)


# ---- running and judging -------------------------------------------------------------------

class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def run_case(case: Case, time_limit_s: int = TIME_LIMIT_S) -> tuple[str, str]:
    """(outcome, detail) for ``case``, run in a fresh temporary directory as the working directory;
    the detail of an ``ok`` is its stderr (warnings), of an ``error`` the error line."""
    import os

    with tempfile.TemporaryDirectory(prefix="laddersim-fuzz-") as tmp:
        work = Path(tmp)
        for rel, data in case.files.items():
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if "hw/p.yaml" in case.files:  # a mutated profile finds the shipped tables beside it
            (work / "hw" / "tables").symlink_to(ROOT / "hardware_profiles" / "tables")
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(time_limit_s)
        code: object = None
        try:
            os.chdir(work)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(list(case.argv))
                except SystemExit as exc:
                    code = exc.code
        except _Hang:
            return "hang", f"over {time_limit_s} s"
        except BaseException:  # noqa: BLE001 - the point is to see any escape
            return "traceback", traceback.format_exc().strip().splitlines()[-1]
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            os.chdir(cwd)
        stderr = err.getvalue()
        if "Traceback" in stderr:
            return "traceback", stderr.strip().splitlines()[-1]
        if code == 2:
            lines = stderr.splitlines()
            if len(lines) == 1 and lines[0].startswith("error: "):
                return "error", lines[0]
            return "multiline", " | ".join(lines)[:400]
        if code == 1 and case.argv[0] == "plan" and (out.getvalue().strip() == "[]"
                                                     or "no configuration" in out.getvalue()):
            return "ok", "no option"
        if code == 0:
            try:
                why = _nonsense(case, work, out.getvalue())
            except Exception as exc:  # noqa: BLE001
                why = f"results unreadable: {type(exc).__name__}: {exc}"
            return ("nonsense", why) if why else ("ok", stderr.strip())
        return "nonsense", f"exit code {code!r}: {stderr.strip()[-300:]}"


GOOD = ("error", "ok")


def main_fuzz(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000, help="total cases, spread evenly over the kinds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--show", action="store_true", help="print every failure")
    parser.add_argument("--save-failures", metavar="DIR", help="write failing cases as corpus JSON files")
    parser.add_argument("--time-limit-s", type=int, default=TIME_LIMIT_S, help="per case; over it is a hang")
    args = parser.parse_args(argv)
    counts: dict[str, Counter] = {k: Counter() for k in args.kinds}
    import time

    seconds: Counter = Counter()
    failures = 0
    per_kind = max(1, args.cases // len(args.kinds))
    for kind in args.kinds:
        for i in range(per_kind):
            case = make_case(kind, args.seed * 1_000_003 + i)
            started = time.monotonic()
            outcome, detail = run_case(case, args.time_limit_s)
            seconds[kind] += time.monotonic() - started
            counts[kind][outcome] += 1
            if outcome not in GOOD:
                failures += 1
                if args.show:
                    print(f"{kind} #{i}: {outcome}: {detail}  argv={case.argv} note={case.note}", file=sys.stderr)
                if args.save_failures:
                    Path(args.save_failures).mkdir(parents=True, exist_ok=True)
                    (Path(args.save_failures) / f"{kind}-{args.seed}-{i}.json").write_text(
                        json.dumps({**case.to_json(), "outcome": outcome, "detail": detail}, indent=1))
        print(f"{kind:<14} " + " ".join(f"{o}={counts[kind][o]}" for o in
                                          ("error", "ok", "traceback", "multiline", "nonsense", "hang"))
              + f"  ({seconds[kind] / per_kind:.2f} s/case)", flush=True)
    total = sum(counts.values(), Counter())
    print(f"{'all':<14} cases={sum(total.values())} " + " ".join(
        f"{o}={total[o]}" for o in ("error", "ok", "traceback", "multiline", "nonsense", "hang")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main_fuzz())
