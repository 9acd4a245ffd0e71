"""What the API's tasks share: a profile from a name or an object, the notes on a profile with no
measurement behind it or used beyond (or under the load of) its calibration, and sequence
arguments given as one value."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from laddersim.hardware.profile import HardwareProfile


def profile_of(hardware: str | Path | HardwareProfile) -> HardwareProfile:
    """``hardware`` as a HardwareProfile: a profile name, a profile .yaml path, a calibration run
    directory, or a profile already loaded."""
    from laddersim.hardware.profile import HardwareProfile, load_profile

    return hardware if isinstance(hardware, HardwareProfile) else load_profile(hardware)


def unmeasured_note(profile: HardwareProfile) -> str | None:
    """One line for a profile with no measured tables behind it (``measured: false``: a what-if
    built from datasheets), else None."""
    if profile.measured:
        return None
    return (f"note: {profile.name} is a what-if profile with no measured tables behind it: its predictions "
            "rest on datasheets only")


def note_unmeasured(profile: HardwareProfile) -> None:
    """Print ``unmeasured_note`` on stderr, if any (where a task prints predictions of the profile)."""
    if (note := unmeasured_note(profile)) is not None:
        print(note, file=sys.stderr)


def note_calibration(profile: HardwareProfile, gpus: int, nodes: int) -> None:
    """Print on stderr, one line each, where a scenario of ``gpus`` GPUs on ``nodes`` nodes leaves
    what ``profile``'s calibration measured, and that it was calibrated under load (if so)."""
    from laddersim.hardware.calibration_extent import extent_note, load_note

    for note in (extent_note(profile, gpus, nodes), load_note(profile)):
        if note is not None:
            print(note, file=sys.stderr)


def listed(values):
    """A sequence argument as a list; one name, path or number given alone is a list of one (a
    string is not split into its characters); None stays None."""
    if values is None:
        return None
    return [values] if isinstance(values, (str, int, float, os.PathLike)) else list(values)


def with_choices(function):
    """``function`` with its docstring's ``{FRAMEWORKS}``, ``{DTYPES}``, ``{KV_CACHES}``,
    ``{KV_READS}``, ``{ALLREDUCES}``, ``{QUANTS}`` and ``{KV_CACHE_DTYPES}`` replaced by the allowed
    values of ``laddersim.support.choices`` (and ``{SCHEDULERS}`` by ``laddersim.traffic.engines``';
    one list, never restated in a docstring)."""
    from laddersim.support.choices import ALLREDUCES, DTYPES, FRAMEWORKS, KV_CACHE_DTYPES, KV_CACHES, KV_READS, QUANTS

    lists = {"{FRAMEWORKS}": FRAMEWORKS, "{DTYPES}": DTYPES, "{KV_CACHES}": KV_CACHES, "{KV_READS}": KV_READS,
             "{ALLREDUCES}": ALLREDUCES, "{QUANTS}": QUANTS, "{KV_CACHE_DTYPES}": KV_CACHE_DTYPES}
    doc = function.__doc__ or ""
    if "{SCHEDULERS}" in doc:  # only the functions that name them load laddersim.traffic
        from laddersim.traffic.engines import ENGINES

        lists["{SCHEDULERS}"] = tuple(ENGINES)
    for token, names in lists.items():
        doc = doc.replace(token, ", ".join(names))
    function.__doc__ = doc
    return function
