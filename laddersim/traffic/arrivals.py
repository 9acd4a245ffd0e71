"""Requests: arrival times and lengths, drawn (Poisson or gamma arrivals, fixed or drawn lengths)
or read from a trace CSV with the columns ``arrival_s,prompt_len,output_len``."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from laddersim.errors import UserInputError
from laddersim.support.io_read import read_text
from laddersim.support.limits import (
    MAX_ARRIVAL_S,
    MAX_GAMMA_SHAPE,
    MAX_RATE,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_TOKENS,
    MIN_GAMMA_SHAPE,
    MIN_RATE,
)

MAX_EXPONENTIAL_MEAN = MAX_TOKENS // 16  # draws are clipped at MAX_TOKENS: probability e^-16 at this mean
LENGTH_FORMS = "N, uniform:LO:HI or exponential:MEAN"
LENGTH_RULE = (f"{LENGTH_FORMS} (integers from 1 to {MAX_TOKENS}, LO <= HI; "
               f"a finite MEAN from 1 to {MAX_EXPONENTIAL_MEAN})")


@dataclass(frozen=True)
class Requests:
    """Requests sorted by arrival: seconds and token counts, one entry per request."""

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def offered_rate(self) -> float | None:
        """Requests per second over the arrival span (the mean gap's inverse); None (undefined)
        for a single request or requests all arriving at one instant."""
        span = float(self.arrival_s[-1] - self.arrival_s[0])
        rate = (len(self) - 1) / span if len(self) > 1 and span > 0 else None
        return rate if rate is not None and math.isfinite(rate) else None


@dataclass(frozen=True)
class LengthSpec:
    """A token-length distribution: ``fixed`` N, ``uniform`` on [LO, HI], or ``exponential``
    with mean MEAN (rounded, at least 1)."""

    kind: str
    a: float
    b: float = 0.0

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, int(self.a), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b) + 1, size=n, dtype=np.int64)
        return np.clip(np.rint(rng.exponential(self.a, size=n)), 1, MAX_TOKENS).astype(np.int64)

    @property
    def max(self) -> float:
        return {"fixed": self.a, "uniform": self.b}.get(self.kind, float("inf"))


def _count(text: str) -> int:
    """A token count: ASCII digits only (int() would take '\u00b3'-like digits, spaces and '_')."""
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise ValueError(text)
    return int(text)


def parse_length(text: str, field: str) -> LengthSpec:
    parts = str(text).split(":")
    try:
        if len(parts) == 1 and 1 <= _count(parts[0]) <= MAX_TOKENS:
            return LengthSpec("fixed", _count(parts[0]))
        if parts[0] == "uniform" and len(parts) == 3 and 1 <= _count(parts[1]) <= _count(parts[2]) <= MAX_TOKENS:
            return LengthSpec("uniform", _count(parts[1]), _count(parts[2]))
        if parts[0] == "exponential" and len(parts) == 2 and 1 <= float(parts[1]) <= MAX_EXPONENTIAL_MEAN:
            return LengthSpec("exponential", float(parts[1]))
    except (ValueError, OverflowError):
        pass
    shown = str(text) if len(str(text)) <= 40 else str(text)[:40] + "..."
    raise UserInputError(f"{field}: {shown!r} is not a length; allowed: {LENGTH_RULE}")


def check_load(n: int, rate_per_s: float | None = None, seed: int = 0, gamma_shape: float = 1.0) -> None:
    """Refuse, in one line naming the field, a request count, rate, seed or arrival shape out of range."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_REQUESTS:
        raise UserInputError(f"requests: {n!r}; allowed: an integer from 1 to {MAX_REQUESTS}")
    number = (int, float, np.number)
    if rate_per_s is not None and not (isinstance(rate_per_s, number) and MIN_RATE <= rate_per_s <= MAX_RATE):
        raise UserInputError(f"rate: {rate_per_s!r}; allowed: a number from {MIN_RATE:g} to {MAX_RATE:g} requests/s")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise UserInputError(f"seed: {seed!r}; allowed: an integer from 0 to {MAX_SEED}")
    if not (isinstance(gamma_shape, number) and MIN_GAMMA_SHAPE <= gamma_shape <= MAX_GAMMA_SHAPE):
        raise UserInputError(f"gamma-shape: {gamma_shape!r}; allowed: a number from {MIN_GAMMA_SHAPE:g} "
                             f"to {MAX_GAMMA_SHAPE:g} (1 = Poisson)")


def draw_requests(n: int, rate_per_s: float, prompt: LengthSpec, output: LengthSpec, seed: int = 0,
                  gamma_shape: float = 1.0) -> Requests:
    """``n`` requests arriving at ``rate_per_s`` on average; gaps are gamma with shape
    ``gamma_shape`` (1: Poisson arrivals; below 1 burstier, above 1 more regular; the gaps'
    squared coefficient of variation is 1 / shape). The first arrives at 0 and the gaps are scaled
    to average exactly 1 / rate, so the offered rate is the one asked for, not a draw of it (for
    Poisson arrivals: the process conditioned on its n-th arrival time)."""
    check_load(n, rate_per_s, seed, gamma_shape)
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(gamma_shape, 1.0 / (gamma_shape * rate_per_s), size=n)
    gaps[0] = 0.0
    if n > 1:
        total = float(gaps[1:].sum())
        if not (total > 0 and math.isfinite(total)):  # every gap underflowed: a very small shape, few requests
            raise UserInputError(f"gamma-shape: {gamma_shape:g} puts all {n} arrivals at one instant; "
                                 "allowed: a larger --gamma-shape or more --requests")
        gaps[1:] *= (n - 1) / (rate_per_s * total)
    return Requests(np.cumsum(gaps), prompt.draw(rng, n), output.draw(rng, n))


def burst_of(requests: Requests) -> Requests:
    """The same requests all arriving at once, at the first one's arrival time."""
    return Requests(np.full(len(requests), float(requests.arrival_s[0])), requests.prompt_len, requests.output_len)


def read_trace(path: str | Path) -> Requests:
    """A trace CSV (header ``arrival_s,prompt_len,output_len``); rows are sorted by arrival.
    Arrival times are finite seconds from 0 to MAX_ARRIVAL_S, lengths integers from 1 to
    MAX_TOKENS, at most MAX_REQUESTS rows."""
    path = Path(path)
    columns = ("arrival_s", "prompt_len", "output_len")
    rule = (f"need arrival_s from 0 to {MAX_ARRIVAL_S:g} s and prompt_len, output_len integers "
            f"from 1 to {MAX_TOKENS}")
    reader = csv.DictReader(io.StringIO(read_text(path, "trace"), newline=""))
    rows = []
    try:
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise UserInputError(f"trace: {path} lacks column(s) {', '.join(missing)}; "
                                 f"needs the header {','.join(columns)}")
        for number, row in enumerate(reader, start=2):
            try:
                values = (float(row["arrival_s"]), _count(str(row["prompt_len"]).strip()),
                          _count(str(row["output_len"]).strip()))
            except (TypeError, ValueError, OverflowError):
                raise UserInputError(f"trace: {path} line {number}: {rule}") from None
            if not (0 <= values[0] <= MAX_ARRIVAL_S and 1 <= values[1] <= MAX_TOKENS
                    and 1 <= values[2] <= MAX_TOKENS):
                raise UserInputError(f"trace: {path} line {number}: {rule}")
            rows.append(values)
            if len(rows) > MAX_REQUESTS:
                raise UserInputError(f"trace: {path} has more than {MAX_REQUESTS} requests; allowed: at most that")
    except csv.Error as exc:
        raise UserInputError(f"trace: {path} is not a CSV file: {exc}") from None
    if not rows:
        raise UserInputError(f"trace: {path} has no requests")
    data = np.array(sorted(rows, key=lambda r: r[0]), dtype=float)
    return Requests(data[:, 0], data[:, 1].astype(np.int64), data[:, 2].astype(np.int64))


def arrival_events(arrival_s: np.ndarray) -> np.ndarray:
    """When each request reaches the scheduler: an arrivals process whose clock moves by timeouts
    of ``at - now`` lands at ``now + (at - now)`` (SimPy's arithmetic, as laddersim always
    simulated it), which is ``at`` itself but where that sum rounds, and at ``now`` for a request
    not after it. Computed for all at once, and step by step only from where a sum rounds until
    the clock is back on the arrival times."""
    at = np.asarray(arrival_s, dtype=float)
    before = np.concatenate(([0.0], at[:-1]))  # the clock, where it is on the arrival times
    lands = np.where(at > before, before + (at - before), before)
    out = at.copy()
    walked = 0
    for i in np.flatnonzero(lands != at).tolist():
        if i < walked:
            continue
        now = float(out[i - 1]) if i else 0.0
        walked = i
        while walked < len(at):
            a = float(at[walked])
            now = now + (a - now) if a > now else now
            out[walked] = now
            walked += 1
            if now == a:
                break
    return out
