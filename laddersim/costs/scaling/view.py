"""The what-if view of a profile's links: the one place where the profile's ``what_if`` factors
(a sweep's or ``simulate``'s bandwidth and latency overrides, or a fitted machine's speed from
``laddersim.fitting.row_parameters``) meet the collective formulas.

A formula reads plain profile fields and passes each bandwidth or latency it uses through the
link it crosses: ``links(profile).intra`` (inside a node) or ``.inter`` (the network). A bandwidth
scale multiplies a bandwidth (so it divides the bandwidth-bound time), a latency scale multiplies
a latency; a measured (size, time) table has its floor (smallest time) as its latency and the
rest as bandwidth-bound time (``LinkScale.table_s``).

The factors are applied where each formula has its value in hand rather than folded into the
profile's fields once: ``x * 1e9 * s`` and ``x * s * 1e9`` round differently, and the outputs of
every shipped command stay the same bit for bit with the factors applied as the formulas always
applied them (identity factors change nothing at all).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from laddersim.hardware.comm_specs import WhatIf
from laddersim.hardware.profile import HardwareProfile


@dataclass(frozen=True, slots=True)
class LinkScale:
    """The factors of one link tier: ``bandwidth`` multiplies its bandwidths, ``latency`` its
    latencies (both 1.0: the profile as measured)."""

    bandwidth: float = 1.0
    latency: float = 1.0

    @property
    def identity(self) -> bool:
        return self.bandwidth == 1.0 and self.latency == 1.0

    def latency_of(self, value):
        """A latency in any unit (us or s), scaled."""
        return value * self.latency

    def latency_s(self, latency_us):
        """A latency given in us, in seconds, scaled."""
        return latency_us * 1e-6 * self.latency

    def bandwidth_of(self, bytes_per_s):
        """A bandwidth in bytes/s, scaled."""
        return bytes_per_s * self.bandwidth

    def bytes_per_s(self, gb_per_s):
        """A bandwidth given in GB/s, in bytes/s, scaled."""
        return gb_per_s * 1e9 * self.bandwidth

    def table_s(self, time_s, floor_s):
        """A measured table's time at some size whose smallest time is ``floor_s``: the floor
        scaled as a latency, the rest as bandwidth-bound time."""
        return floor_s * self.latency + np.maximum(time_s - floor_s, 0.0) / self.bandwidth

    def table_scalar_s(self, time_s: float, floor_s: float) -> float:
        """``table_s`` of one Python float (kept a float)."""
        return floor_s * self.latency + max(time_s - floor_s, 0.0) / self.bandwidth


@dataclass(frozen=True, slots=True)
class ScaledLinks:
    """The profile's two link tiers with their what-if factors."""

    intra: LinkScale
    inter: LinkScale

    @property
    def identity(self) -> bool:
        return self.intra.identity and self.inter.identity


UNSCALED = LinkScale()


def links(profile: HardwareProfile) -> ScaledLinks:
    """The what-if view of ``profile``'s links (one object per distinct set of factors)."""
    return _view(profile.what_if)


@lru_cache(maxsize=4096)
def _view(w: WhatIf) -> ScaledLinks:
    return ScaledLinks(LinkScale(w.intra_bandwidth_scale, w.intra_latency_scale),
                       LinkScale(w.inter_bandwidth_scale, w.inter_latency_scale))


def unscaled(profile: HardwareProfile) -> HardwareProfile:
    """``profile`` as measured: its what-if factors all 1."""
    return profile if profile.what_if == WhatIf() else profile.model_copy(update={"what_if": WhatIf()})


def is_scaled(profile: HardwareProfile) -> bool:
    """Does ``profile`` carry what-if factors (or a fit's speed) other than the identity?"""
    return profile.what_if != WhatIf()
