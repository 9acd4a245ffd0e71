"""``laddersim simulate --trace``: Chrome-trace JSON whose events are the timeline's spans,
one process per rank and one thread per stream (opens in Perfetto / chrome://tracing)."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest

from laddersim.cli import main
from laddersim.simulate import make_scenario, simulate

SCENARIO = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
            "--prompt-len", "64", "--gen-len", "8"]
TID = {"compute": 0, "comm": 1}


def _run_trace(tmp_path, capsys, *extra) -> dict:
    out = tmp_path / "trace.json"
    assert main(["simulate", *SCENARIO, "--schedule", "ladder", "--schedule", "standard",
                 "--trace", str(out), *extra]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def _expected_spans(steps) -> pd.DataFrame:
    """The timeline of the first schedule (the one traced): prefill plus the given decode steps."""
    result = simulate(make_scenario("llama-3.1-8b", "h100-sxm-nvswitch", 2, 1, 64, 8, "ladder"))
    frames = [result.timeline("prefill")] + ([result.timeline(steps)] if steps else [])
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
    want = Counter(_key(r.op, int(r.rank), TID[r.stream], r.start_s * 1e6, (r.end_s - r.start_s) * 1e6)
                   for r in spans.itertuples())
    assert got == want
    assert {e["pid"] for e in complete} == {0, 1}  # pid = rank, both ranks of TP 2
    assert {e["tid"] for e in complete} == {0, 1}  # tid = stream
    # The args say which step each event belongs to: prefill is step -1.
    assert sorted({e["args"]["step"] for e in complete}) == [-1] + steps
    assert all(e["dur"] >= 0 for e in complete)


def test_trace_metadata_names_ranks_and_streams(tmp_path, capsys):
    events = _run_trace(tmp_path, capsys)["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert processes == {0: "rank 0", 1: "rank 1"}
    assert threads == {(r, t): s for r in (0, 1) for s, t in TID.items()}


def test_trace_of_ladder_overlaps_allreduce_with_compute(tmp_path, capsys):
    """What the trace is for: under ladder an AllReduce runs while the same rank computes."""
    events = [e for e in _run_trace(tmp_path, capsys)["traceEvents"] if e["ph"] == "X" and e["pid"] == 0]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["tid"] == 0]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["tid"] == 1 and e["name"].endswith("allreduce")]
    assert comm
    overlapped = sum(any(s < c_end and c_start < e for s, e in compute) for c_start, c_end in comm)
    assert overlapped > 0.9 * len(comm)


def test_bad_trace_steps_is_one_line_exit_2(tmp_path, capsys):
    code = main(["simulate", *SCENARIO, "--trace", str(tmp_path / "t.json"), "--trace-steps", "some"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: trace-steps:") and err.count("\n") == 1
