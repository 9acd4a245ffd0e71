"""Which profile of an ``extends:`` chain states each value of a derived profile.

A profile file with ``extends: BASE`` states only what differs from BASE; every key it leaves out
is BASE's (``laddersim.hardware.profile.read_profile_mapping`` merges mappings key by key, and a
list or a ``{value, source}`` entry is replaced whole). ``laddersim profiles show`` marks each
value the file itself does not state with the profile it comes from.
"""

from __future__ import annotations

LEAVES = ({"value", "source"}, {"file", "source"})  # entries replaced whole, never merged key by key


def stated_paths(mapping: dict, prefix: str = "") -> set[str]:
    """The dotted paths of the values a profile file states itself (a list or a sourced entry is one)."""
    out = set()
    for key, value in mapping.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value and not any(leaf <= set(value) for leaf in LEAVES):
            out |= stated_paths(value, path)
        else:
            out.add(path)
    return out


def _covers(stated: set[str], path: str) -> bool:
    return any(path == s or path.startswith(s + ".") or path.startswith(s + "[") for s in stated)


def inherited_from(lineage: list[tuple[str, dict]], paths: list[str]) -> dict[str, str]:
    """For each of ``paths`` (``profiles show``'s) that the first file of ``lineage`` (nearest
    first, ``profile_lineage``) does not state, the name of the nearest profile that does; paths no
    file states (schema defaults, derived lines) are left out."""
    if len(lineage) < 2:
        return {}
    stated = [(name, stated_paths(mapping)) for name, mapping in lineage]
    out = {}
    for path in paths:
        if _covers(stated[0][1], path):
            continue
        owner = next((name for name, own in stated[1:] if _covers(own, path)), None)
        if owner is not None:
            out[path] = owner
    return out
