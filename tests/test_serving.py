"""Serving under load: closed-form limits against `laddersim simulate`, Little's law, ladder vs
standard under load, the scheduler's invariants, and the iteration-time model's exactness and
stated error bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from laddersim.costs.op_costs import Phase, attention_time_s
from laddersim.traffic.arrivals import Requests, draw_requests, parse_length
from laddersim.traffic.capacity import OfferedLoad, max_sustainable_rate
from laddersim.traffic.iteration_time import IterationTimer
from laddersim.traffic.options import serving_options
from laddersim.traffic.replica import simulate_replica
from laddersim.traffic.run import serve, serving_scenario
from laddersim.traffic.scheduler import ContinuousBatcher
from laddersim.simulation.simulate import make_scenario, simulate

MODEL, TP = "llama-3.1-70b", 8


@pytest.fixture(scope="module")
def scenarios():
    return {(hw, s): serving_scenario(MODEL, hw, TP, s) for hw in ("h100-sxm-nvswitch", "h100-sxm-p2p-off")
            for s in ("standard", "ladder")}


def _static(hw: str, schedule: str, batch: int, prompt: int, gen: int) -> dict:
    return simulate(make_scenario(model=MODEL, hardware=hw, tp=TP, batch=batch, prompt_len=prompt, gen_len=gen,
                                  schedule=schedule, kv_cache="dynamic", kv_reads="per_kv_head")).summary()


def _fixed(n: int, rate: float, prompt: int, gen: int, seed: int = 0) -> Requests:
    return draw_requests(n, rate, parse_length(str(prompt), "p"), parse_length(str(gen), "g"), seed)


@pytest.mark.parametrize("schedule", ["standard", "ladder"])
def test_vanishing_rate_gives_single_request_prefill_and_batch1_decode(scenarios, schedule):
    hw = "h100-sxm-p2p-off"
    static = _static(hw, schedule, 1, 512, 48)
    result = serve(scenarios[hw, schedule], _fixed(12, 0.01, 512, 48), serving_options())
    # Requests 100 s apart never meet, so every one is the single request `simulate` runs.
    assert result.metrics["ttft_p50_s"] == pytest.approx(static["prefill_s"], rel=0.02)
    assert result.metrics["tpot_p50_s"] == pytest.approx(static["tpot_s"], rel=0.02)
    # The model is exact there (grid points, attention interpolated only within one event order).
    assert result.metrics["ttft_p50_s"] == pytest.approx(static["prefill_s"], rel=1e-9)
    assert result.metrics["tpot_p50_s"] == pytest.approx(static["tpot_s"], rel=1e-9)


def test_saturation_with_batch_cap_reaches_static_batch_throughput(scenarios):
    hw, batch, prompt, gen = "h100-sxm-nvswitch", 8, 256, 32
    static = _static(hw, "ladder", batch, prompt, gen)["tokens_per_s"]
    opts = serving_options(max_running=batch, max_batched_tokens=batch * prompt)
    # Everything queued at once: each wave is exactly the static batch (one prefill, then decode).
    n = 4 * batch
    at_once = Requests(np.zeros(n), np.full(n, prompt), np.full(n, gen))
    at_once = serve(scenarios[hw, "ladder"], at_once, opts)
    assert at_once.metrics["throughput_tokens_per_s"] == pytest.approx(static, rel=1e-3)
    # Poisson arrivals far above capacity: waves desynchronise, throughput still approaches it.
    poisson = serve(scenarios[hw, "ladder"], _fixed(200, 500.0, prompt, gen), opts)
    assert poisson.metrics["throughput_tokens_per_s"] == pytest.approx(static, rel=0.05)


def test_littles_law(scenarios):
    rate = 3.0
    requests = draw_requests(1500, rate, parse_length("uniform:128:1024", "p"), parse_length("uniform:16:256", "g"),
                             seed=3)
    m = serve(scenarios["h100-sxm-p2p-off", "standard"], requests, serving_options(chunked_prefill=True)).metrics
    # The simulation's own count of requests in the system, time-averaged, against rate x E2E.
    assert m["mean_in_system"] == pytest.approx(requests.offered_rate * m["e2e_mean_s"], rel=0.05)


@pytest.mark.parametrize("chunked", [False, True])
def test_ladder_never_worse_under_load(scenarios, chunked):
    hw = "h100-sxm-p2p-off"
    assert _static(hw, "ladder", 16, 512, 64)["tokens_per_s"] > _static(hw, "standard", 16, 512, 64)["tokens_per_s"]
    requests = draw_requests(300, 5.0, parse_length("uniform:128:2048", "p"), parse_length("uniform:16:256", "g"),
                             seed=1)
    opts = serving_options(chunked_prefill=chunked, max_batched_tokens=4096, ttft_slo_s=0.5, tpot_slo_s=0.03)
    std = serve(scenarios[hw, "standard"], requests, opts).metrics
    lad = serve(scenarios[hw, "ladder"], requests, opts).metrics
    for name in ("ttft", "tpot", "e2e"):
        for p in ("p50", "p90", "p99"):
            assert lad[f"{name}_{p}_s"] <= std[f"{name}_{p}_s"], (name, p)
    assert std["goodput_req_per_s"] is not None and lad["goodput_req_per_s"] >= std["goodput_req_per_s"]


def test_capacity_search_brackets_the_slo(scenarios):
    opts = serving_options(ttft_slo_s=0.5, tpot_slo_s=0.03, max_batched_tokens=4096, chunked_prefill=True)
    load = OfferedLoad(150, parse_length("512", "p"), parse_length("64", "g"), seed=2)
    caps = {}
    for schedule in ("standard", "ladder"):
        cap = max_sustainable_rate(scenarios["h100-sxm-p2p-off", schedule], opts, load, start_rate=4.0, rel_tol=0.05)
        attained = {rate: m["slo_attainment"] for rate, m in cap.tried}
        if cap.bracket is not None:  # a failing rate found: bisected to rel_tol
            ok, bad = cap.bracket
            assert ok == cap.rate and ok < bad <= ok * 1.05 and not cap.at_least
            assert attained[ok] >= 0.9 > attained[bad]
        else:  # every rate tried passed, up to the saturation throughput: "capacity at least R"
            assert cap.at_least and "at least" in cap.describe()
            assert min(attained.values()) >= 0.9 and cap.rate == max(attained)
            assert cap.rate == pytest.approx(cap.saturation_req_per_s, rel=1e-12)
        caps[schedule] = cap
    # The standard schedule misses the TPOT SLO below its saturation throughput: a real bracket.
    assert caps["standard"].bracket is not None and caps["standard"].rate < caps["standard"].saturation_req_per_s
    assert caps["ladder"].rate >= caps["standard"].rate


def test_same_seed_same_results_different_seed_different(scenarios):
    scenario = scenarios["h100-sxm-nvswitch", "ladder"]
    draw = lambda seed: draw_requests(100, 6.0, parse_length("exponential:300", "p"),  # noqa: E731
                                      parse_length("uniform:8:128", "g"), seed)
    a = serve(scenario, draw(5), serving_options(chunked_prefill=True)).frame
    b = serve(scenario, draw(5), serving_options(chunked_prefill=True)).frame
    c = serve(scenario, draw(6), serving_options(chunked_prefill=True)).frame
    assert a.equals(b) and not a.equals(c)


def test_preemption_by_recompute_completes_every_request(scenarios):
    requests = _fixed(40, 50.0, 200, 120)
    opts = serving_options(max_running=16, block_size=16)
    # 80 blocks hold ~4 full requests; 16 running sequences outgrow them and are preempted.
    timer = IterationTimer(scenarios["h100-sxm-nvswitch", "standard"])
    run = simulate_replica(timer, requests, opts, kv_blocks=80)
    assert run.preemptions.sum() > 0
    assert np.all(run.finish_s >= run.first_token_s) and not np.isnan(run.finish_s).any()
    roomy = simulate_replica(timer, requests, opts, kv_blocks=10_000)
    assert roomy.preemptions.sum() == 0
    assert run.finish_s.max() > roomy.finish_s.max()  # recomputation and a smaller batch cost time


def _drain(batcher) -> list[tuple[int, list[int], list[tuple[int, int, int]]]]:
    """Every iteration the batcher plans until it has nothing left: (step, decoding requests,
    prompt chunks as (request, cached, tokens))."""
    steps = []
    for step in range(1000):
        it = batcher.plan()
        if it is None:
            return steps
        steps.append((step, [batcher.seq[s] for s in it.decode], [(batcher.seq[s], c, t) for s, c, t in it.chunks]))
        batcher.complete(it, float(step))
    raise AssertionError("the batcher did not drain")


def test_whole_request_admission_reserves_the_output_and_never_preempts():
    """TensorRT-LLM's GUARANTEED_NO_EVICT by hand: two requests of a 16-token prompt and 16 output
    tokens, 8-token blocks, 5 blocks in all. Admitted on demand, both start (2 blocks each), the
    first needs its third block at its 9th token and the second its third at once: one free block
    is not enough for both, so the newer one is preempted and prefilled again later. Admitted
    whole, the first takes 4 blocks (16 + 16 tokens) at once, the second waits until it finishes,
    and nothing is preempted."""
    prompt, output = np.array([16, 16]), np.array([16, 16])
    on_demand = ContinuousBatcher(prompt, output, 5, serving_options(chunked_prefill=True, block_size=8))
    whole = ContinuousBatcher(prompt, output, 5, serving_options(chunked_prefill=True, block_size=8,
                                                                 kv_admission="whole_request"))
    for batcher in (on_demand, whole):
        batcher.add(0)
        batcher.add(1)
    assert _drain(on_demand)[0][2] == [(0, 0, 16), (1, 0, 16)]
    assert on_demand.preemptions.sum() > 0
    steps = _drain(whole)
    assert steps[0][2] == [(0, 0, 16)]  # the second request's 4 blocks are not free
    # the first request's 16 tokens: its prompt's step, then 15 decode steps; the second enters after
    assert [s for s, decode, chunks in steps if (1, 0, 16) in chunks] == [16]
    assert all(decode == [0] for _, decode, _ in steps[1:16])
    assert whole.preemptions.sum() == 0 and whole.free_blocks == 5
    assert whole.generated_by_request.tolist() == [16, 16]


@settings(max_examples=25, deadline=None)
@given(chunked=st.booleans(), max_running=st.integers(1, 8), budget=st.integers(64, 600),
       blocks=st.integers(30, 120), seed=st.integers(0, 10_000), runs=st.booleans(), reserve=st.booleans())
def test_scheduler_invariants(chunked, max_running, budget, blocks, seed, runs, reserve):
    """Budget, batch and blocks hold at every iteration, every request ends with its output, all
    blocks come back; with ``runs``, stretches of decode-only iterations go through decode runs
    (laddersim.traffic.decode_run) and keep the same invariants; with ``reserve`` (each request
    admitted holding its whole length's blocks) nothing is ever preempted."""
    rng = np.random.default_rng(seed)
    n = 12
    prompt = rng.integers(1, 200, n)
    output = rng.integers(1, 60, n)
    limit = min(blocks * 8, budget if not chunked else 10**9)
    output = np.minimum(output, np.maximum(1, limit - prompt))
    keep = prompt + output <= limit
    prompt, output = prompt[keep], output[keep]
    if len(prompt) == 0:
        return
    opts = serving_options(chunked_prefill=chunked, max_running=max_running, max_batched_tokens=budget, block_size=8,
                           kv_admission="whole_request" if reserve else "on_demand")
    batcher = ContinuousBatcher(prompt, output, blocks, opts)
    for i in range(len(prompt)):
        batcher.add(i)
    done = 0
    for step in range(100_000):
        run = batcher.steady_decode() if runs else None
        if run is not None:
            run.done = int(rng.integers(1, run.limit + 1))
            assert run.free_blocks() >= 0
            done += batcher.advance(run, float(step))
        else:
            it = batcher.plan()
            if it is None:
                break
            assert it.tokens <= budget and len(batcher.seq) <= max_running
            for slot in it.decode:
                assert batcher.cached[slot] + 1 <= batcher.blocks[slot] * 8
            done += batcher.complete(it, float(step))
        assert 0 <= batcher.free_blocks and sum(batcher.blocks) + batcher.free_blocks == blocks
        assert all(-(-c // 8) <= b for c, b in zip(batcher.cached, batcher.blocks))
    assert done == len(prompt)
    assert batcher.free_blocks == blocks
    assert batcher.generated_by_request.tolist() == [int(x) for x in output]
    assert not reserve or batcher.preemptions.sum() == 0


@pytest.mark.parametrize("framework", ["gpt-fast", "vllm", "gpt-fast-flash"])
def test_attention_cost_is_the_frameworks_op_cost(framework):
    """Serving's attention is the cost model's on the framework's paths (gpt-fast: math SDPA prefill
    and generated-reduction decode; vllm: fused kernels, FA3's prefill speedup): B sequences of one
    shape cost exactly op_costs' batch-B pass, in decode and in prefill."""
    from laddersim.costs.op_costs import prefill_attention_time_s
    from laddersim.traffic.attention_cost import AttentionCost
    s = serving_scenario(MODEL, "h100-sxm-nvswitch", TP, "standard", framework=framework)
    att = AttentionCost(s)
    for batch, kv in ((1, 1), (1, 1025), (7, 300), (64, 4000), (3, 9000)):  # 9000: beyond the first table
        expected = attention_time_s(s.model, s.hardware, s.workload, TP, Phase("decode", batch, 1), [kv])[0]
        assert att.seconds([kv] * batch, batch * kv, []) == pytest.approx(expected, rel=1e-12)
    for batch, prompt in ((1, 1), (1, 100), (4, 512), (1, 3000)):
        expected = attention_time_s(s.model, s.hardware, s.workload, TP, Phase("prefill", batch, prompt), [prompt])[0]
        assert att.seconds([], 0, [(i, 0, prompt) for i in range(batch)]) == pytest.approx(expected, rel=1e-12)
    # A chunk after cached positions: the cost model's own chunk price; decode and prefill add up.
    chunk = prefill_attention_time_s(s.model, s.hardware, s.workload, TP, Phase("prefill", 1, 256), 1000)
    assert att.seconds([], 0, [(0, 1000, 256)]) == pytest.approx(chunk, rel=1e-12)
    assert chunk > prefill_attention_time_s(s.model, s.hardware, s.workload, TP, Phase("prefill", 1, 256))
    decode = attention_time_s(s.model, s.hardware, s.workload, TP, Phase("decode", 2, 1), [700])[0]
    assert att.seconds([700, 700], 1400, [(0, 1000, 256)]) == pytest.approx(decode + chunk, rel=1e-12)


def test_gpt_fast_and_vllm_attention_differ_where_their_kernels_do():
    """The framework's paths are what serving prices: gpt-fast's math SDPA prefill materialises
    fp32 scores (slower than vLLM's FlashAttention-3) and its decode reads the scores back."""
    from laddersim.traffic.attention_cost import AttentionCost
    gpt, vllm = (AttentionCost(serving_scenario(MODEL, "h100-sxm-nvswitch", TP, "standard", framework=f))
                 for f in ("gpt-fast", "vllm"))
    assert gpt.seconds([], 0, [(0, 0, 2048)]) > 1.5 * vllm.seconds([], 0, [(0, 0, 2048)])
    assert gpt.seconds([2000] * 16, 32000, []) > vllm.seconds([2000] * 16, 32000, [])


@settings(max_examples=30, deadline=None)
@given(lens=st.lists(st.integers(1, 6000), min_size=1, max_size=64))
def test_ragged_decode_attention_between_its_extremes(lens):
    """A ragged decode batch costs the kernels' fixed part once plus each sequence's share at its
    own length: between the cost model's uniform batches at the shortest and the longest length,
    and exactly the share sum (here across the math path's softmax switch at 1024 positions)."""
    from laddersim.traffic.attention_cost import AttentionCost
    s = _attention_scenario()
    att = _ATTENTION.setdefault("gpt-fast", AttentionCost(s))
    got = att.seconds(lens, sum(lens), [])
    batch = Phase("decode", len(lens), 1)
    low, high = attention_time_s(s.model, s.hardware, s.workload, TP, batch, [min(lens), max(lens)])
    assert low * (1 - 1e-12) <= got <= high * (1 + 1e-12)
    one = attention_time_s(s.model, s.hardware, s.workload, TP, Phase("decode", 1, 1), lens)
    assert got == pytest.approx(att.decode_fixed_s + (one - att.decode_fixed_s).sum(), rel=1e-12)


_ATTENTION: dict = {}


def _attention_scenario():
    return serving_scenario(MODEL, "h100-sxm-nvswitch", TP, "standard")


def test_serving_refuses_a_static_cache():
    from laddersim.errors import UserInputError
    from laddersim.traffic.attention_cost import AttentionCost
    static = make_scenario(model=MODEL, hardware="h100-sxm-nvswitch", tp=TP, batch=1, prompt_len=1, gen_len=1,
                           schedule="standard", kv_cache="static")
    with pytest.raises(UserInputError, match="^kv-cache: .*allowed: dynamic$"):
        AttentionCost(static)


@pytest.mark.parametrize("schedule", ["ladder", "desync_half"])
def test_iteration_time_tail_and_layer_extrapolation_are_exact(schedule):
    timer = IterationTimer(serving_scenario(MODEL, "h100-sxm-p2p-off", TP, schedule))
    for tokens, logits, a_s in ((1, 1, 2e-5), (24, 10, 1.3e-4), (2048, 3, 9e-4), (64, 64, 3e-4)):
        seconds, compute, comm, tail_s = timer._base_at(tokens)
        whole, _ = timer._run(timer._full, seconds, compute, comm, a_s)  # the whole model, tail at ``tokens``
        expected = whole - tail_s + timer._tail_seconds(tokens, logits)
        assert timer.seconds(tokens, logits, a_s) == pytest.approx(expected, rel=1e-9)
    assert timer.whole_model_runs == 0  # every anchor was extrapolated from the reduced runs


@pytest.mark.parametrize("framework", ["gpt-fast", "vllm"])
def test_prefill_iteration_tail_follows_the_frameworks_prefill_logits(framework):
    """An iteration with prompt tokens runs the LM head on every new token under gpt-fast
    (prefill_logits: all), on the sampling sequences under vLLM: the timer equals a whole-model
    engine run with op_costs' durations of that pass."""
    from laddersim.costs.op_costs import op_times_s
    from laddersim.traffic.iteration_shape import MixedPhase
    s = serving_scenario(MODEL, "h100-sxm-p2p-off", TP, "ladder", framework=framework)
    timer = IterationTimer(s)
    for tokens, logits, a_s in ((512, 1, 4e-4), (2048, 3, 2e-3), (16, 2, 5e-5)):
        times = op_times_s(s.model, s.hardware, s.workload, TP, MixedPhase("prefill", logits, 1, tokens), [1.0])
        seconds = np.array([float(times[k][0]) for k in timer._kind_names])
        _, compute, comm, _ = timer._base_at(tokens)
        whole, _ = timer._run(timer._full, seconds, compute, comm, a_s)
        assert timer.gpu_seconds(tokens, logits, a_s, prefill=True) == pytest.approx(whole, rel=1e-9)
        if tokens >= 512:  # the LM head over every prompt token costs more than over the samples (a GEMV)
            every_token = timer.gpu_seconds(tokens, logits, a_s, prefill=True) > timer.gpu_seconds(tokens, logits, a_s)
            assert every_token == (framework == "gpt-fast")


@settings(max_examples=8, deadline=None)
@given(tokens=st.integers(17, 5000), a_us=st.floats(5.0, 3000.0))
@example(tokens=513, a_us=5.0)  # 70B TP 8: o_proj and down split K up to 512 rows, not at 513
def test_token_interpolation_error_within_stated_bound(tokens, a_us):
    scenario = serving_scenario(MODEL, "h100-sxm-p2p-off", TP, "ladder")
    coarse, exact = _timers(scenario)
    before = coarse.max_error_bound
    coarse.max_error_bound = 0.0
    got = coarse.seconds(tokens, 4, a_us * 1e-6)
    bound = coarse.max_error_bound
    coarse.max_error_bound = max(before, bound)
    truth = exact.seconds(tokens, 4, a_us * 1e-6)  # 8192 points per octave: every integer is a grid point
    # The bound assumes the time overlap saves grows monotonically between two grid points; the cost
    # tables' piecewise-linear interpolation in M (GEMM rows) bends it by a few ppm at small token
    # counts (17-29 tokens on this profile: 5e-6 of the iteration against a 2e-6 bound).
    assert abs(got - truth) <= bound * got + 1e-5 * got
    assert bound < 0.05


def test_interpolation_never_spans_a_kernel_path_change():
    """Between two grid points where a linear's split-K reduce appears or goes (or NCCL changes
    algorithm), the bracket is bisected down to the change: both sides of it are exact. The linears
    stop splitting K above the H100's weight-streaming ridge (275 rows: laddersim.costs.pass_shapes)."""
    from laddersim.costs.pass_shapes import weight_streaming_rows

    scenario = serving_scenario(MODEL, "h100-sxm-p2p-off", TP, "ladder")
    timer = IterationTimer(scenario, 8)
    ridge = int(weight_streaming_rows(scenario.hardware.gpu))
    assert ridge == 275 and timer._path(ridge) != timer._path(ridge + 1)
    assert timer._bracket(ridge) == (ridge, ridge) and timer._bracket(ridge + 1) == (ridge + 1, ridge + 1)
    assert timer._bracket(530) == (512, 576)  # a smooth stretch keeps interpolating
    assert timer._path(512) == timer._path(576)


_TIMER_CACHE: dict = {}


def _timers(scenario):
    if "t" not in _TIMER_CACHE:
        _TIMER_CACHE["t"] = (IterationTimer(scenario, 8), IterationTimer(scenario, 8192))
    return _TIMER_CACHE["t"]


def test_arrivals_rate_burstiness_and_trace_order(tmp_path):
    from laddersim.traffic.arrivals import read_trace
    fixed = parse_length("100", "p")
    for shape in (1.0, 0.25):
        req = draw_requests(20_000, 5.0, fixed, fixed, seed=1, gamma_shape=shape)
        gaps = np.diff(req.arrival_s)
        assert gaps.mean() == pytest.approx(1 / 5.0, rel=1e-12)  # the offered rate is exact
        assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / shape, rel=0.15)  # squared CV = 1 / shape
    lengths = draw_requests(5000, 1.0, parse_length("uniform:10:20", "p"), parse_length("exponential:50", "g"), 2)
    assert lengths.prompt_len.min() == 10 and lengths.prompt_len.max() == 20
    assert lengths.output_len.min() >= 1 and lengths.output_len.mean() == pytest.approx(50, rel=0.05)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n2.0,5,6\n1.0,7,8\n")
    got = read_trace(trace)
    assert got.arrival_s.tolist() == [1.0, 2.0] and got.prompt_len.tolist() == [7, 5]
