"""A framework file's kernel calibration: what one GPU's profiler trace of a compiled decode step
says each kernel class of a layer costs (``laddersim calibrate kernels`` writes it,
``laddersim.fitting.kernel_trace``; ``laddersim kernels --framework FILE.yaml`` reads it).

A trace holds a few batch sizes at one TP. Each traced batch is a *regime*: the kernel path its
linears took (``generated``: reductions fused with their neighbours, batch 1 under Inductor's
coordinate-descent decomposition; ``library``: cuBLAS GEMMs) and, per kernel class, how many
kernels a layer launched and their device time. A class's time is priced as its kernels' floors
plus the bytes that class streams (its *driver*) at the bandwidth it achieved in the trace.

The floors come from the trace itself (``ClassCost.floor_us``): each traced kernel contributes its
own time up to the hardware profile's kernel floor (a pointwise kernel of 1 us replayed in a CUDA
graph floors at 1 us, not at the profile's 3.86), and where the rest would need the bytes to stream
faster than the GPU's datasheet bandwidth, the bytes stream at that bandwidth and the floors are
what is left. What the floors leave is the class's streaming time; another shape scales it by the
driver's bytes and keeps the floors (a schedule whose layer runs other op kinds, e.g. parallel's
fused QKV + gate/up GEMM, scales the class by what the cost model charges that layer against the
standard one: ``laddersim.costs.calibrated_kernels.schedule_layer``). The drivers:

* ``weights``: the layer's linear weights on one rank (library GEMMs and their split-K reduces);
* ``kv``: K and V expanded to every query head over the attended cache (attention; the
  generated K/V expansion of a library-path layer);
* ``weights_and_kv``: both (a generated-path layer's fused reductions stream the weights and
  expand K/V);
* ``fixed``: the traced time as it is (copies, memsets, small library kernels).

Another batch or TP takes the regime of the nearest traced batch with the same linear path and
scales each class by its driver's bytes: that is the extrapolation, and the reason the drivers
are mechanisms (what the kernels stream), not fitted curves.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

_FROZEN = ConfigDict(frozen=True, extra="forbid")
Driver = Literal["weights", "kv", "weights_and_kv", "fixed"]
CLASS_DRIVERS = {"library_gemm": "weights", "splitk_reduce": "weights", "attention": "kv",
                 "copy": "fixed", "other": "fixed", "collective": "fixed"}


class ClassCost(BaseModel):
    """One kernel class of a traced layer."""

    model_config = _FROZEN

    kernels: NonNegativeFloat
    us: float  # the traced device time per layer (a difference of layer counts: may be ~0)
    driver: Driver
    bandwidth_gbps: PositiveFloat | None = None  # driver bytes / (us - floors); None: fixed
    # The class's kernel floors per layer, us (see the module docstring); None (files written
    # before it was recorded): ``kernels`` x the calibration's ``floor_us``.
    floor_us: NonNegativeFloat | None = None
    source: str = Field(min_length=3)

    def floors_us(self, floor_us: float) -> float:
        """The class's floors per layer: the recorded ones, else ``kernels`` x ``floor_us``."""
        return self.floor_us if self.floor_us is not None else self.kernels * floor_us


class KernelRegime(BaseModel):
    """One traced batch: its linear path and its classes."""

    model_config = _FROZEN

    batch: PositiveInt
    linear_path: Literal["generated", "library"]
    layer_us: float
    classes: dict[str, ClassCost]
    source: str = Field(min_length=3)


class KernelCalibration(BaseModel):
    """The traced shard (``tp``, ``cache_len`` attended positions, ``dtype_bytes`` per element)
    and its regimes; ``floor_us``: one kernel's floor (the profile's at calibration)."""

    model_config = _FROZEN

    trace: str
    tp: PositiveInt
    cache_len: PositiveInt
    dtype_bytes: PositiveInt
    floor_us: NonNegativeFloat
    regimes: list[KernelRegime] = Field(min_length=1)
    source: str = Field(min_length=3)

    def regime_for(self, batch: int) -> KernelRegime:
        """The traced regime priced for ``batch``: the batch-1 regime for one row (if traced),
        else the nearest traced batch (in log batch; the smaller on a tie) of the library path."""
        path = "generated" if batch == 1 else "library"
        same = [r for r in self.regimes if r.linear_path == path] or list(self.regimes)
        return min(same, key=lambda r: (abs(math.log(r.batch) - math.log(batch)), r.batch))


def driver_bytes(driver: str, *, weights_bytes: float, kv_bytes: float) -> float:
    return {"weights": weights_bytes, "kv": kv_bytes, "weights_and_kv": weights_bytes + kv_bytes,
            "fixed": 0.0}[driver]
