"""KV-cache blocks one replica has: GPU memory left by the weights and the largest iteration's
activations (laddersim.costs.memory_fit), divided into paged blocks."""

from __future__ import annotations

import math

from laddersim.costs.memory_fit import attention_peak_bytes, memory_use
from laddersim.errors import DoesNotFitError
from laddersim.schedules.stages import Stage
from laddersim.simulation.simulate import Scenario
from laddersim.traffic.options import ServingOptions
from laddersim.model.workload import Workload


def kv_block_count(scenario: Scenario, options: ServingOptions, stage: Stage | None = None) -> int:
    """Blocks of ``block_size`` tokens per GPU (every rank holds its heads' share of each token;
    a pipeline ``stage``'s GPUs hold its layers' share, beside its own weights).

    The activations are memory_fit's for an iteration of ``max_batched_tokens`` tokens with
    ``max_running`` sampling sequences (a prefill of that many tokens is the largest transient);
    the attention's buffers are the framework's path's for one prompt of ``max_batched_tokens``
    tokens over its own positions (memory_fit.attention_peak_bytes: the most queries and positions a
    whole-prompt iteration attends; quadratic on a math path, so one long prompt is its worst case).
    A chunk of chunked prefill also attends its sequence's earlier positions: the blocks are
    counted before the requests are known, so those scores are not.
    """
    model, hw, work, tp = scenario.model, scenario.hardware, scenario.workload, scenario.tp
    largest = Workload(batch=options.max_running,
                       prompt_len=max(1, math.ceil(options.max_batched_tokens / options.max_running)),
                       gen_len=1, dtype=work.dtype, kv_cache="dynamic", framework=work.framework,
                       quant=work.quant, kv_cache_dtype=work.kv_cache_dtype)
    use = memory_use(model, hw, largest, tp, stage)
    longest_prompt = Workload(batch=1, prompt_len=options.max_batched_tokens, gen_len=1, dtype=work.dtype,
                              kv_cache="dynamic", framework=work.framework)
    attention_bytes = attention_peak_bytes(model, longest_prompt, tp)[0]
    free_bytes = use.capacity_bytes - use.weights_bytes - use.activations_bytes - attention_bytes
    layers = stage.n_layers if stage else model.n_layers
    block_bytes = options.block_size * model.kv_bytes_per_token_per_rank(tp, work.kv_bytes) * layers / model.n_layers
    blocks = int(free_bytes // block_bytes) if free_bytes > 0 else 0
    if blocks < 1:
        gib = 2**30
        raise DoesNotFitError(
            f"memory: {model.name} at tp={tp}{f', pp={stage.count} stage {stage.index}' if stage else ''} leaves no KV "
            f"cache on {hw.name}: weights "
            f"{use.weights_bytes / gib:.1f} GiB + activations {use.activations_bytes / gib:.1f} GiB + "
            f"{work.framework} attention {attention_bytes / gib:.1f} GiB of "
            f"{use.capacity_bytes / gib:.1f} GiB usable; raise tp or pp or lower max-batched-tokens")
    return blocks
