"""Python's cyclic garbage collector paused for work that makes many objects that live on and few
reference cycles.

A full collection walks every tracked object. A sweep's worker keeps its programs' event-order
trees and the costs of its scenarios (hundreds of MB of small objects), and its parent keeps every
finished row: each full collection walks them all again, and the allocations of the work itself
keep triggering collections (the 100,000-point sweep of examples/sweep_every_machine.yaml: a sixth
of a worker's CPU, a fifth of the parent's). Reference counting frees everything else as before;
the collector runs again, as usual, once the work is done.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block, then enabled again if it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
