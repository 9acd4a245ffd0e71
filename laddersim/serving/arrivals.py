"""Requests: arrival times and lengths, drawn (Poisson or gamma arrivals, fixed or drawn lengths)
or read from a trace CSV with the columns ``arrival_s,prompt_len,output_len``."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from laddersim.errors import UserInputError

LENGTH_FORMS = "N, uniform:LO:HI or exponential:MEAN"


@dataclass(frozen=True)
class Requests:
    """Requests sorted by arrival: seconds and token counts, one entry per request."""

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def offered_rate(self) -> float:
        """Requests per second over the arrival span (the mean gap's inverse)."""
        span = float(self.arrival_s[-1] - self.arrival_s[0])
        return (len(self) - 1) / span if len(self) > 1 and span > 0 else float("inf")


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
        return np.maximum(1, np.rint(rng.exponential(self.a, size=n))).astype(np.int64)

    @property
    def max(self) -> float:
        return {"fixed": self.a, "uniform": self.b}.get(self.kind, float("inf"))


def parse_length(text: str, field: str) -> LengthSpec:
    parts = str(text).split(":")
    try:
        if len(parts) == 1 and int(parts[0]) >= 1:
            return LengthSpec("fixed", int(parts[0]))
        if parts[0] == "uniform" and len(parts) == 3 and 1 <= int(parts[1]) <= int(parts[2]):
            return LengthSpec("uniform", int(parts[1]), int(parts[2]))
        if parts[0] == "exponential" and len(parts) == 2 and float(parts[1]) >= 1:
            return LengthSpec("exponential", float(parts[1]))
    except ValueError:
        pass
    raise UserInputError(f"{field}: '{text}' is not a length; allowed: {LENGTH_FORMS} (integers >= 1, LO <= HI)")


def draw_requests(n: int, rate_per_s: float, prompt: LengthSpec, output: LengthSpec, seed: int = 0,
                  gamma_shape: float = 1.0) -> Requests:
    """``n`` requests arriving at ``rate_per_s`` on average; gaps are gamma with shape
    ``gamma_shape`` (1: Poisson arrivals; below 1 burstier, above 1 more regular; the gaps'
    squared coefficient of variation is 1 / shape). The first arrives at 0 and the gaps are scaled
    to average exactly 1 / rate, so the offered rate is the one asked for, not a draw of it (for
    Poisson arrivals: the process conditioned on its n-th arrival time)."""
    if n < 1:
        raise UserInputError(f"requests: must be >= 1, got {n}")
    if not rate_per_s > 0:
        raise UserInputError(f"rate: must be > 0, got {rate_per_s}")
    if not gamma_shape > 0:
        raise UserInputError(f"gamma-shape: must be > 0, got {gamma_shape}")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(gamma_shape, 1.0 / (gamma_shape * rate_per_s), size=n)
    gaps[0] = 0.0
    if n > 1:
        gaps[1:] *= (n - 1) / (rate_per_s * gaps[1:].sum())
    return Requests(np.cumsum(gaps), prompt.draw(rng, n), output.draw(rng, n))


def read_trace(path: str | Path) -> Requests:
    """A trace CSV (header ``arrival_s,prompt_len,output_len``); rows are sorted by arrival."""
    path = Path(path)
    columns = ("arrival_s", "prompt_len", "output_len")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise UserInputError(f"trace: {path} lacks column(s) {', '.join(missing)}; "
                                     f"needs the header {','.join(columns)}")
            rows = []
            for number, row in enumerate(reader, start=2):
                try:
                    values = (float(row["arrival_s"]), int(row["prompt_len"]), int(row["output_len"]))
                except (TypeError, ValueError):
                    raise UserInputError(f"trace: {path} line {number}: arrival_s must be a number and "
                                         "prompt_len, output_len integers") from None
                if not (values[0] >= 0 and values[1] >= 1 and values[2] >= 1):
                    raise UserInputError(f"trace: {path} line {number}: need arrival_s >= 0, "
                                         "prompt_len >= 1, output_len >= 1")
                rows.append(values)
    except OSError as exc:
        raise UserInputError(f"trace: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserInputError(f"trace: {path} is not a UTF-8 CSV file") from None
    if not rows:
        raise UserInputError(f"trace: {path} has no requests")
    data = np.array(sorted(rows, key=lambda r: r[0]), dtype=float)
    return Requests(data[:, 0], data[:, 1].astype(np.int64), data[:, 2].astype(np.int64))
