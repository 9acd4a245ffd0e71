"""``laddersim simulate --trace``: Chrome-trace JSON whose events are the timeline's spans of
every schedule, one process per schedule and one thread per rank and stream (opens in Perfetto /
chrome://tracing)."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest

from laddersim.cli import main
from laddersim.simulation.simulate import make_scenario, simulate

SCENARIO = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
            "--prompt-len", "64", "--gen-len", "8"]
TID = {"compute": 0, "comm": 1}
SCHEDULES = ("ladder", "standard")  # in the order given: pid 0 and 1


def _tid(rank: int, stream: str) -> int:
    return 2 * int(rank) + TID[stream]


def _run_trace(tmp_path, capsys, *extra) -> dict:
    out = tmp_path / "trace.json"
    assert main(["simulate", *SCENARIO, "--schedule", "ladder", "--schedule", "standard",
                 "--trace", str(out), *extra]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def _expected_spans(steps) -> pd.DataFrame:
    """The timeline of every schedule: prefill plus the given decode steps, with its pid."""
    frames = []
    for pid, schedule in enumerate(SCHEDULES):
        result = simulate(make_scenario(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, batch=1,
                                        prompt_len=64, gen_len=8, schedule=schedule))
        frames += [f.assign(pid=pid) for f in [result.timeline("prefill")] + ([result.timeline(steps)] if steps else [])]
    return pd.concat(frames, ignore_index=True)


def _key(name, pid, tid, ts_us, dur_us):
    # Rounded to 1e-6 us: the JSON holds floats, the comparison is of the same numbers.
    return (name, pid, tid, round(ts_us, 6), round(dur_us, 6))


@pytest.mark.parametrize("extra, steps", [((), [0, 1, 2]), (("--trace-steps", "all"), list(range(7))),
                                          (("--trace-steps", "0"), [])])
def test_trace_events_are_the_timeline_spans(extra, steps, tmp_path, capsys):
    trace = _run_trace(tmp_path, capsys, *extra)
    events = trace["traceEvents"]
    spans = _expected_spans(steps)
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(spans)  # one "X" event per span, prefill + steps, every rank
    got = Counter(_key(e["name"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in complete)
    want = Counter(_key(r.op, r.pid, _tid(r.rank, r.stream), r.start_s * 1e6, (r.end_s - r.start_s) * 1e6)
                   for r in spans.itertuples())
    assert got == want
    assert {e["pid"] for e in complete} == {0, 1}  # pid = schedule
    assert {e["tid"] for e in complete} == {0, 1, 2, 3}  # tid = (rank, stream) of both ranks of TP 2
    assert {e["args"]["rank"] for e in complete} == {0, 1}
    # The args say which step each event belongs to: prefill is step -1.
    assert sorted({e["args"]["step"] for e in complete}) == [-1] + steps
    assert all(e["dur"] >= 0 for e in complete)


def test_trace_metadata_names_ranks_and_streams(tmp_path, capsys):
    events = _run_trace(tmp_path, capsys)["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert processes == {0: "ladder", 1: "standard"}
    assert threads == {(pid, _tid(r, s)): f"rank {r} {s}" for pid in (0, 1) for r in (0, 1) for s in TID}


def test_trace_of_ladder_overlaps_allreduce_with_compute(tmp_path, capsys):
    """What the trace is for: under ladder (pid 0) an AllReduce runs while the same rank computes;
    under standard (pid 1) far fewer do (only with ops that do not wait for the sum)."""
    trace = _run_trace(tmp_path, capsys)["traceEvents"]

    def overlapped_share(pid: int) -> float:
        events = [e for e in trace if e["ph"] == "X" and e["pid"] == pid]
        compute = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["tid"] == _tid(0, "compute")]
        comm = [(e["ts"], e["ts"] + e["dur"]) for e in events
                if e["tid"] == _tid(0, "comm") and e["name"].endswith("allreduce")]
        assert comm
        return sum(any(s < c_end and c_start < e for s, e in compute) for c_start, c_end in comm) / len(comm)

    assert overlapped_share(0) > 0.9
    assert overlapped_share(1) < overlapped_share(0) - 0.3


def test_bad_trace_steps_is_one_line_exit_2(tmp_path, capsys):
    # checked by the argument parser, before any simulation: argparse exits with status 2
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", *SCENARIO, "--trace", str(tmp_path / "t.json"), "--trace-steps", "some"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "trace-steps" in err and "'all'" in err and err.count("\n") == 1
