"""Values remembered by the identity of the objects they were computed from.

Frozen profiles and their parts are large pydantic models: hashing or comparing them by value
costs more than what is computed from them, and a sweep makes thousands of profile copies that
share parts (``laddersim.hardware.overrides.with_overrides`` copies only what it changes). A
value is kept under the ids of its objects together with the objects themselves, so an id is
never reused by another object while its entry lives; the memo is emptied when full.
"""

from __future__ import annotations

from operator import is_
from typing import Callable, TypeVar

T = TypeVar("T")


class IdentityMemo:
    def __init__(self, size: int):
        self.size = size
        self._kept: dict[tuple, tuple] = {}

    def get(self, objects: tuple, rest: tuple, compute: Callable[[], T]) -> T:
        """The value for ``objects`` (by identity) and ``rest`` (hashable values), computed by
        ``compute()`` the first time."""
        key = (tuple(map(id, objects)), rest)
        kept = self._kept.get(key)
        if kept is not None and all(map(is_, kept[0], objects)):
            return kept[1]
        value = compute()
        if len(self._kept) >= self.size:
            self._kept.clear()
        self._kept[key] = (objects, value)
        return value

    def clear(self) -> None:
        self._kept.clear()
