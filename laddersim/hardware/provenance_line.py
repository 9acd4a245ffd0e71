"""A report's provenance line: the laddersim version and each profile's hash, by profile name."""

from __future__ import annotations

from laddersim.errors import UserInputError
from laddersim.hardware.profile import load_profile
from laddersim.support.provenance import laddersim_version, profile_sha256


def provenance_line(profile_names) -> str:
    """One Markdown line for a report: the laddersim version and the SHA-256 (first 16 hex digits)
    of each profile used, by name or path; a name that no longer loads is listed as such."""
    parts = []
    for name in sorted(dict.fromkeys(str(n) for n in profile_names)):
        try:
            parts.append(f"`{name}` {profile_sha256(load_profile(name))[:16]}")
        except UserInputError:
            parts.append(f"`{name}` (not loadable here)")
    return (f"Made by laddersim {laddersim_version()}; profiles used (SHA-256 of values and tables, first 16 "
            f"digits): {', '.join(parts)}.")
