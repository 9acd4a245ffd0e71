"""Was the machine busy with other work while a run measured? Then its points are not this
machine's speed, and a profile fitted to them mispredicts (-69% and -77% in one such run).

Three signs, over one ``calibrate run`` invocation of locally spawned ranks (``LoadWatch``):

* other processes' CPU time: the machine's busy time (``/proc/stat``) less this run's own (the
  launcher and its reaped ranks, ``os.times``), as a share of every CPU for the run's duration;
* the 1-minute load average beyond the run's own ranks, per CPU (sampled every few seconds);
* the spread of the points' repeats: the median over the points measured of (p90 - p10) / median.

Any sign past its limit marks the run: one warning line at its end (``run_warning``), the figures in
``run.json`` (the invocation's ``load``, and the line with its date in the run's ``load_warnings``),
and ``calibrate fit`` repeats the warning (``load_warnings``). The points are kept: the user
decides whether to re-measure.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass

# Limits: past any of them the run was measured under load. Other work taking a quarter of the
# machine's CPU time competes with the ranks for their cores (each rank stands for one GPU and is
# pinned to a share of the cores); a load average half a CPU above the ranks' own means runnable
# work queued beside them; repeats whose middle 80% spread over more than their median are
# interrupted, not merely noisy (an idle machine's spread is a fraction of that).
OTHERS_CPU_SHARE_MAX = 0.25
LOAD_EXCESS_PER_CPU_MAX = 0.5
SPREAD_MAX = 1.0
LOAD_SAMPLE_S = 2.0  # how often the load average is sampled during the run
MIN_ELAPSED_S = 1.0  # a shorter invocation measures too little to judge its CPU shares


def machine_busy_cpu_s() -> float | None:
    """CPU seconds all CPUs spent busy since boot (``/proc/stat``: user, nice, system, irq,
    softirq, steal), or None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process and its reaped children (the ranks, once joined)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def repeat_spread(rows: list[dict]) -> float | None:
    """Median over ``rows`` with a median and its p10/p90 of (p90 - p10) / median, or None."""
    spreads = [(row["p90_us"] - row["p10_us"]) / row["time_us"] for row in rows
               if all(isinstance(row.get(c), (int, float)) for c in ("time_us", "p10_us", "p90_us"))
               and row["time_us"] > 0]
    return statistics.median(spreads) if spreads else None


@dataclass(frozen=True)
class LoadRecord:
    """What one invocation saw (``run.json``'s ``invocations[-1].load``)."""

    elapsed_s: float
    cpus: int
    ranks: int
    points: int
    others_cpu_share: float | None  # None: no /proc/stat
    load_average: float | None  # the mean of the 1-minute load average sampled during the run
    repeat_spread: float | None  # None: no point with a median and percentiles was measured

    def signs(self) -> list[str]:
        """Each sign past its limit, in words; empty for a run on an idle machine."""
        out = []
        if self.elapsed_s >= MIN_ELAPSED_S and self.others_cpu_share is not None \
                and self.others_cpu_share > OTHERS_CPU_SHARE_MAX:
            out.append(f"other processes used {100 * self.others_cpu_share:.0f}% of the {self.cpus} CPUs")
        if self.load_average is not None and (self.load_average - self.ranks) / self.cpus > LOAD_EXCESS_PER_CPU_MAX:
            out.append(f"load average {self.load_average:.1f} on {self.cpus} CPUs beside {self.ranks} ranks")
        if self.repeat_spread is not None and self.repeat_spread > SPREAD_MAX:
            out.append(f"the repeats spread over {self.repeat_spread:.1f}x their median (p10 to p90)")
        return out

    def as_dict(self) -> dict:
        data = asdict(self)
        return {key: round(value, 4) if isinstance(value, float) else value for key, value in data.items()}


class LoadWatch:
    """Samples the machine from ``start`` to ``finish`` (in the launching process)."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self.cpus = os.cpu_count() or 1
        self.started = time.monotonic()
        self.busy0, self.own0 = machine_busy_cpu_s(), own_cpu_s()
        self.loads: list[float] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="laddersim-load-watch", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            try:
                self.loads.append(os.getloadavg()[0])
            except OSError:
                return
            if self._done.wait(LOAD_SAMPLE_S):
                return

    def finish(self, new_rows: list[dict]) -> LoadRecord:
        """The record of the invocation; ``new_rows``: the points it measured."""
        self._done.set()
        self._thread.join()
        elapsed = time.monotonic() - self.started
        busy = machine_busy_cpu_s()
        share = None
        if busy is not None and self.busy0 is not None and elapsed > 0:
            others = (busy - self.busy0) - (own_cpu_s() - self.own0)
            share = min(1.0, max(0.0, others / (elapsed * self.cpus)))
        return LoadRecord(elapsed_s=elapsed, cpus=self.cpus, ranks=self.ranks, points=len(new_rows),
                          others_cpu_share=share,
                          load_average=statistics.fmean(self.loads) if self.loads else None,
                          repeat_spread=repeat_spread(new_rows))


def load_line(record: LoadRecord) -> str | None:
    """What the run measured under load, in words (``run.json``'s ``load_warnings`` hold it with its
    date), or None on an idle machine or when nothing was measured."""
    signs = record.signs()
    if not signs or not record.points:
        return None
    return f"measured under load ({'; '.join(signs)}): {record.points} points"


def run_warning(line: str) -> str:
    """``calibrate run``'s line for ``load_line``."""
    return (f"warning: calibrate run: {line} are kept and marked in run.json (calibrate fit repeats this); for a "
            "profile to trust, re-measure on an idle machine into a new --out")


def load_warnings(manifest: dict) -> list[str]:
    """``calibrate fit``'s warning lines for a run marked as measured under load."""
    return [f"warning: run.json: {line}: a profile fitted to them can mispredict; re-measure on an idle machine "
            "into a new --out" for line in manifest.get("load_warnings", [])]


def under_load_hint(manifest: dict) -> str | None:
    """For an error about a run's measurements: that the run was measured under load (its last
    marked invocation), or None for a run never marked."""
    lines = manifest.get("load_warnings", [])
    if not lines:
        return None
    return (f"this run was {str(lines[-1]).split(': ', 1)[-1]} (run.json): other processes' work is in its "
            "timings; re-measure on an idle machine into a new --out")
