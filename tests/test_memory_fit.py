"""The memory check counts what the framework's attention path allocates: the math SDPA
path's materialised scores refuse a long prompt the fused path runs; measured runs still fit."""

from __future__ import annotations


import pytest
from hypothesis import given, settings, strategies as st

from laddersim.costs.math_attention import math_decode_peak_bytes, math_prefill_peak_bytes
from laddersim.costs.memory_fit import attention_peak_bytes, check_fits, memory_use
from laddersim.errors import DoesNotFitError
from laddersim.model.shape import load_model_shape
from laddersim.validation.core import ValidationSetup, check_rows, read_measured
from laddersim.model.workload import Workload
from laddersim.support.resources import data_path
from tests.cli_run import run_cli

LLAMA_70B = load_model_shape("llama-3.1-70b")


def test_math_prefill_peak_is_the_softmax_of_fp32_scores():
    """Closed form: 1 sequence, 2 queries over 4 cache positions, 3 heads of 5, fp32 scores from
    fp16 inputs: Q 2*3*5*4 = 120 B, K or V 4*3*5*4 = 240 B, scores 3*2*4*4 = 96 B, mask 2*4 = 8 B.
    scores GEMM 120 + 480 + 96 + 8 = 704; softmax 240 + 192 + 8 = 440; values 240 + 96 + 120 = 456."""
    assert math_prefill_peak_bytes(variant="math_fp32", batch=1, prompt_len=2, cache_len=4, heads=3,
                                   head_dim=5, dtype_bytes=2) == 704
    # A long row: the softmax (two score-sized buffers) is the peak; the input dtype on ``math``.
    assert math_prefill_peak_bytes(variant="math", batch=2, prompt_len=1000, cache_len=1000, heads=8,
                                   head_dim=128, dtype_bytes=2) == 2 * 1000 * 8 * 128 * 2 + 2 * (2 * 8 * 1000 * 1000 * 2) + 1000 * 1000
    assert math_decode_peak_bytes(variant="math_fp32", batch=4, cache_len=100, heads=8, dtype_bytes=2) == 4 * 8 * 100 * 4


def test_long_prompt_on_the_math_path_is_refused_in_one_line(capsys):
    """70B TP 8, a 200k-token prompt: gpt-fast's math path builds 8 heads x 200k x 200k fp32 scores
    and their probabilities a layer (2.3 TiB a rank); vLLM's fused kernel runs it."""
    argv = ["simulate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm-nvswitch", "--tp", "8",
            "--prompt-len", "200000", "--gen-len", "8"]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert "gpt-fast prefill math_fp32 attention" in lines[0] and "71.7 GiB usable" in lines[0]
    assert "--framework vllm" in lines[0]
    attention_gib = 2 * 8 * 200000 * 200008 * 4 / 2**30
    needed = float(lines[0].split("needs ")[1].split(" GiB")[0])
    assert needed > attention_gib
    code, out, err = run_cli(argv + ["--framework", "vllm", "--json"], capsys)
    assert code == 0, err


def test_fused_path_adds_no_scores():
    work = Workload(batch=1, prompt_len=200000, gen_len=8, framework="vllm", kv_cache="dynamic",
                    kv_reads="per_kv_head")
    attention, path = attention_peak_bytes(LLAMA_70B, work, 8)
    assert path == "prefill fused"
    assert attention == 200000 * 8 * (128 * 2 + 4)  # the output and the log-sum-exp per query row and head


@settings(max_examples=40, deadline=None)
@given(prompt=st.integers(1, 20000), extra=st.integers(1, 20000), batch=st.integers(1, 64),
       framework=st.sampled_from(["gpt-fast", "gpt-fast-flash", "vllm"]))
def test_more_tokens_never_need_less_memory(h100, prompt, extra, batch, framework):
    short = Workload(batch=batch, prompt_len=prompt, gen_len=8, framework=framework)
    longer = Workload(batch=batch, prompt_len=prompt + extra, gen_len=8, framework=framework)
    a, b = memory_use(LLAMA_70B, h100, short, 8), memory_use(LLAMA_70B, h100, longer, 8)
    assert b.attention_bytes >= a.attention_bytes and b.total_bytes > a.total_bytes


def test_the_papers_70b_runs_still_fit(h100):
    """Every row of the built-in 70B figure ran on 80 GB H100s: the check passes all of them."""
    frame = read_measured()
    assert len(check_rows(frame, ValidationSetup())) == len(frame)


def test_measured_8b_runs_still_fit(h100):
    """The 8B compiled table's TP 1 batch 64 rows (1024 + 512 tokens, math_fp32 scores of 25.5 GiB
    a layer) ran on one 80 GB H100: they fit."""
    frame = read_measured(data_path("validation", "ladder_8b_tp_sweep.csv"))
    scenarios = check_rows(frame, ValidationSetup())
    tightest = max(scenarios, key=lambda s: memory_use(s.model, s.hardware, s.workload, s.tp).total_bytes)
    use = check_fits(tightest.model, tightest.hardware, tightest.workload, tightest.tp)
    assert use.attention_path == "prefill math_fp32" and use.attention_bytes > 20 * 2**30


def test_decode_peaks_on_a_dynamic_cache_with_a_short_prompt():
    """gpt-fast's math path on a dynamic cache, a 1-token prompt and 8191 generated: the prompt's
    scores are 1 x 1 a head, the last decode step's one row over 8192 positions: fp32, 64 x 8 x 8192 x 4 B."""
    work = Workload(batch=64, prompt_len=1, gen_len=8191, kv_cache="dynamic")
    assert attention_peak_bytes(LLAMA_70B, work, 8) == (64 * 8 * 8192 * 4, "decode math_fp32")


def test_a_prompt_that_fits_the_kv_cache_but_not_its_scores(h100):
    """70B TP 8, batch 1, 32k prompt: weights and KV cache 17.6 GiB, but 8 heads x 32k x 32k fp32
    scores twice over is 64 GiB more: refused, naming the attention term."""
    with pytest.raises(DoesNotFitError, match="gpt-fast prefill math_fp32 attention"):
        check_fits(LLAMA_70B, h100, Workload(batch=1, prompt_len=32768, gen_len=8), 8)
    check_fits(LLAMA_70B, h100, Workload(batch=1, prompt_len=32768, gen_len=8, framework="vllm"), 8)


def test_serving_leaves_the_math_paths_scores_out_of_the_kv_cache(h100):
    """A replica's KV blocks: gpt-fast's math path holds one 8192-token prompt's fp32 scores and
    probabilities (8 heads x 8192^2 x 4 B x 2, 4 GiB at 70B TP 8; with V expanded and the mask)
    that vLLM's fused kernel does not."""
    from laddersim.traffic.kv_blocks import kv_block_count
    from laddersim.traffic.options import serving_options
    from laddersim.traffic.run import serving_scenario

    options = serving_options(max_batched_tokens=8192)
    blocks = {fw: kv_block_count(serving_scenario("llama-3.1-70b", h100, 8, "standard", framework=fw), options)
              for fw in ("gpt-fast", "vllm")}
    block_bytes = options.block_size * LLAMA_70B.kv_bytes_per_token_per_rank(8, 2)
    fused = 8192 * 8 * (128 * 2 + 4)
    softmax = 8192 * 8 * 128 * 4 + 2 * 8 * 8192 * 8192 * 4 + 8192 * 8192  # V, scores, probabilities, mask
    expected = (softmax - fused) / block_bytes
    assert abs((blocks["vllm"] - blocks["gpt-fast"]) - expected) <= 1.5


def test_graph_path_peak_is_the_expanded_cache_and_the_mask_bias():
    """Closed form of eager SDPA with a mask (gpt-fast-graph): 2 sequences, 3 queries over 10 cache
    positions, 4 query heads on 2 KV heads of 8, fp16: K and V expanded 2 x (2*10*4*8*2) = 2560 B;
    the mask, its logical_not and the fp16 bias 3*10*(1+1+2) = 120 B; Q and the output 2*3*4 rows of
    2*8*2 B plus a 4-byte log-sum-exp each: 24*36 = 864 B. Without the repeat, no expanded copies."""
    from laddersim.costs.sdpa_attention import sdpa_peak_bytes

    shape = dict(batch=2, queries=3, cache_len=10, heads=4, kv_heads=2, head_dim=8, dtype_bytes=2)
    assert sdpa_peak_bytes(**shape) == 2560 + 120 + 864
    assert sdpa_peak_bytes(**shape, repeat_kv=False) == 120 + 864
    work = Workload(batch=4, prompt_len=1024, gen_len=256, framework="gpt-fast-graph")
    peak, path = attention_peak_bytes(LLAMA_70B, work, 8)
    assert path == "prefill sdpa_mem_efficient"
    assert peak == sdpa_peak_bytes(batch=4, queries=1024, cache_len=work.max_seq_len, heads=8, kv_heads=1,
                                   head_dim=128, dtype_bytes=2)
