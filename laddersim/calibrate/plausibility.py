"""Physical plausibility of measured points before a fit uses them.

A calibration CSV or an imported log can hold numbers no hardware produces: a time of zero, or
an AllReduce of at most 1 GiB taking a second or more on GPUs (NVLink moves 1 GiB in a few ms, a
100 Gb/s network in ~0.2 s; a second means a broken measurement or a wrong unit). They are one
error line naming the file, the point and the allowed range, never a profile. CPU (gloo) runs are
exempt from the time bound: ranks time-sharing a few cores are slow by design.
"""

from __future__ import annotations

from pathlib import Path

from laddersim.errors import UserInputError

GIB = 1024**3
MAX_SMALL_MESSAGE_US = 1e6  # 1 s: the bound for messages of at most 1 GiB on GPUs


def check_points(rows: list[dict], path: str | Path, backend: str | None) -> None:
    """Refuse the first implausible row of ``rows`` (typed rows of one measurement CSV)."""
    for number, row in enumerate(rows, start=2):  # line 1 is the header
        for column, value in row.items():
            if column.endswith("_us") and value is not None and not value > 0:
                raise UserInputError(f"measurement: {path}:{number}: {column} = {value}; allowed: a time > 0 us")
        size, time_us = row.get("size_bytes"), row.get("time_us")
        if (backend == "nccl" and size is not None and time_us is not None and size <= GIB
                and time_us >= MAX_SMALL_MESSAGE_US):
            raise UserInputError(f"measurement: {path}:{number}: {time_us:g} us for {size} bytes; allowed: under "
                                 f"{MAX_SMALL_MESSAGE_US:g} us (1 s) for messages of at most 1 GiB on GPUs")
