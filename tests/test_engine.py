"""The SimPy engine on tiny hand-built programs: exact (op, time) logs, as SimPy's own tests do."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.engine.simulator import RankWork, run_engine


def spans(result, rank=0):
    return [(round(s, 12), round(e, 12)) for s, e in zip(result.start_s[rank], result.end_s[rank])]


def test_compute_stream_runs_in_program_order():
    work = RankWork(["compute"] * 3, [(), (), ()], np.array([1.0, 2.0, 3.0]))
    assert spans(run_engine([work])) == [(0, 1), (1, 3), (3, 6)]


def test_comm_waits_for_its_dependency_and_compute_waits_for_comm():
    # compute a (2s) -> allreduce (1s) -> compute b (1s) that needs the allreduce
    work = RankWork(["compute", "comm", "compute"], [(), (0,), (1,)], np.array([2.0, 1.0, 1.0]))
    assert spans(run_engine([work])) == [(0, 2), (2, 3), (3, 4)]


def test_overlap_without_dependency():
    # the allreduce of op 0 overlaps op 2, which does not need it
    work = RankWork(["compute", "comm", "compute"], [(), (0,), ()], np.array([1.0, 3.0, 1.0]))
    assert spans(run_engine([work])) == [(0, 1), (1, 4), (1, 2)]


def test_collective_starts_when_last_rank_arrives():
    slow = RankWork(["compute", "comm"], [(), (0,)], np.array([5.0, 1.0]))
    fast = RankWork(["compute", "comm"], [(), (0,)], np.array([1.0, 1.0]))
    result = run_engine([slow, fast])
    assert result.ready_s[1, 1] == 1.0  # the fast rank reached it at t=1
    assert result.start_s[1, 1] == 5.0 and result.end_s[1, 1] == 6.0  # but waited for the straggler
    assert result.end_s[0, 1] == 6.0


def test_interference_slows_both_only_while_overlapped():
    # compute 2s and comm 2s fully overlapped with slowdowns 0.25 (compute) and 1.0 (comm):
    # compute rate 0.8, comm rate 0.5 while both run. Compute ends at 2.5 s, having let comm do
    # 1.25 s of work; the remaining 0.75 s of comm runs alone: ends at 3.25 s.
    c0 = RankWork(["compute", "comm", "compute"], [(), (0,), ()], np.array([1e-9, 2.0, 2.0]))
    result = run_engine([c0], compute_slowdown=0.25, comm_slowdown=1.0)
    assert result.end_s[0, 2] == pytest.approx(1e-9 + 2.5, abs=1e-9)
    assert result.end_s[0, 1] == pytest.approx(1e-9 + 3.25, abs=1e-9)


def test_concurrent_collectives_share_a_link():
    # two groups of one rank each; both collectives (2 s alone) cross the same link: each takes 4 s
    a = RankWork(["comm"], [()], np.array([2.0]), group=0)
    b = RankWork(["comm"], [()], np.array([2.0]), group=1)
    result = run_engine([a, b], group_links={0: ("net",), 1: ("net",)})
    assert result.end_s[0, 0] == pytest.approx(4.0) and result.end_s[1, 0] == pytest.approx(4.0)
    separate = run_engine([a, b], group_links={0: ("net0",), 1: ("net1",)})
    assert separate.end_s[0, 0] == pytest.approx(2.0)


def test_shared_link_bandwidth_returns_when_one_finishes():
    a = RankWork(["comm"], [()], np.array([1.0]), group=0)
    b = RankWork(["comm"], [()], np.array([3.0]), group=1)
    result = run_engine([a, b], group_links={0: ("net",), 1: ("net",)})
    # both at half speed until a finishes at t=2 (b did 1 s of work); b's last 2 s run alone
    assert result.end_s[0, 0] == pytest.approx(2.0)
    assert result.end_s[1, 0] == pytest.approx(4.0)


def test_dependency_cycle_is_reported():
    work = RankWork(["compute", "comm"], [(1,), (0,)], np.array([1.0, 1.0]))
    with pytest.raises(RuntimeError, match="deadlock"):
        run_engine([work])


def test_per_collective_slowdowns_apply_while_that_collective_runs():
    # compute 0 (1 s), then collective 1 (2 s standalone) beside compute 2 (4 s); compute 3 (1 s)
    # after both, then collective 4 (1 s standalone) beside compute 5 (1 s). Collective 1 slows
    # compute by 1.0 (half speed) and is itself slowed by 0.5; collective 4 disturbs nothing.
    work = RankWork(["compute", "comm", "compute", "compute", "comm", "compute"],
                    [(), (0,), (), (1,), (3,), ()], np.array([1.0, 2.0, 4.0, 1.0, 1.0, 1.0]))
    compute = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    comm = np.array([0.0, 0.5, 0.0, 0.0, 0.0, 0.0])
    got = spans(run_engine([work], compute, comm))
    # t 1..4: both run, collective 1 at 1/1.5 finishes its 2 s at t = 4; compute 2 has done
    # 3 s x 1/2 = 1.5 s of its 4 s, the remaining 2.5 s run alone: ends at t = 6.5.
    assert got[1] == (1, 4) and got[2] == (1, 6.5)
    # Compute 3 and 5 run at full speed next to collective 4 (no slowdown given for it).
    assert got[3] == (6.5, 7.5) and got[4] == (7.5, 8.5) and got[5] == (7.5, 8.5)
    # The same run with scalars applies the slowdowns to every collective.
    scalar = spans(run_engine([work], 1.0, 0.5))
    # Collective 4 at 1/1.5 ends at t = 9; compute 5 did 1.5 s x 1/2 = 0.75 s by then, 0.25 s alone.
    assert scalar[4] == (7.5, 9.0) and scalar[5] == (7.5, 9.25)


def test_an_op_shorter_than_the_clock_resolution_late_in_a_run_finishes():
    # At t = 1e6 s one float step is ~1.2e-10 s: a 3e-11 s op (or a remainder of that size
    # between two overlapping ops) cannot advance the clock. It used to be rescheduled forever
    # (a large --jitter drew such durations); it now counts as done at once.
    import signal

    def hang(_signum, _frame):
        raise TimeoutError("engine did not finish")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(20)
    try:
        work = RankWork(["compute", "comm", "compute"], [(), (0,), ()], np.array([1e6, 3e-11, 3e-11]))
        result = run_engine([work, work], compute_slowdown=0.5, comm_slowdown=0.5)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert result.end_s[0, 2] == pytest.approx(1e6, abs=1e-9)
    assert result.end_s[0, 1] == pytest.approx(1e6, abs=1e-9)
