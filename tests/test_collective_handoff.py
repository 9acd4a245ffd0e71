"""The NCCL kernel's start-up behind its producer (``framework.collective_sync_us``) is the
collective's own time: it delays the collective, not the compute stream, so a schedule that
blocks on the collective (standard) pays it in full and one that overlaps it (ladder) hides it."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.costs.op_costs import Phase, op_times_s
from laddersim.hardware.profile import load_profile
from laddersim.model.shape import load_model_shape
from laddersim.simulation.simulate import make_scenario, simulate
from laddersim.model.workload import Workload

H100 = load_profile("h100-sxm-nvswitch")


def _with_sync(us: float):
    framework = H100.framework.model_copy(
        update={"collective_sync_us": H100.framework.collective_sync_us.model_copy(update={"value": us})})
    return H100.model_copy(update={"framework": framework})


def test_the_sync_is_the_collectives_and_the_launch_op_keeps_the_copy():
    model = load_model_shape("llama-3.1-8b")
    work = Workload(batch=8, prompt_len=1024, gen_len=512, framework="gpt-fast")
    phase = Phase("decode", 8, 1)
    base = op_times_s(model, _with_sync(0.0), work, 8, phase, np.array([1536.0]))
    more = op_times_s(model, _with_sync(10.0), work, 8, phase, np.array([1536.0]))
    for kind in ("allreduce", "allgather_logits"):
        assert more[kind][0] - base[kind][0] == pytest.approx(10e-6)
    assert more["collective_launch"][0] == base["collective_launch"][0] > 0  # the input copy


def test_ladder_hides_the_collectives_start_up_that_standard_pays():
    """Llama-3.1-8B TP 8 batch 8 (the 8B table's row: the AllReduce is far shorter than a module's
    compute): 10 us more start-up per collective costs standard its 2 x 32 collectives a step,
    ladder almost nothing."""
    grow = {}
    for schedule in ("standard", "ladder"):
        steps = []
        for us in (0.0, 10.0):
            scenario = make_scenario(model="llama-3.1-8b", hardware=_with_sync(us), tp=8, batch=8, prompt_len=1024,
                                     gen_len=16, schedule=schedule, dtype="float16")
            steps.append(simulate(scenario).summary()["decode_step_s"])
        grow[schedule] = steps[1] - steps[0]
    assert grow["standard"] == pytest.approx(65 * 10e-6, rel=0.05)  # 64 AllReduces + the logits gather
    assert grow["ladder"] < 0.1 * grow["standard"]
