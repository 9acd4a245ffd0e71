"""``plan --rate`` plans around the candidates that cannot serve a workload (issue #31 follow-up):
a candidate whose weights leave no KV cache, whose KV cache cannot hold the longest request, or
that sustains no rate is skipped with its reason (one line each) and the others are still ranked;
exit 1 with one clear line when every candidate is skipped. Only a workload that no candidate
could serve (beyond one iteration's token budget, beyond the model's context) is refused, in one
line naming a flag ``plan`` has. And the requests per rate tried are printed in every answer."""

from __future__ import annotations

import json
import re

import pytest

from cli_run import run_cli
from laddersim.cli import main
from laddersim.errors import UserInputError
from laddersim.hardware.profile import load_profile
from laddersim.model.shape import load_model_shape
from laddersim.planning.serving_plan import check_serving_workload, plan_for_rate
from laddersim.traffic.arrivals import LengthSpec
from laddersim.traffic.capacity import OfferedLoad
from laddersim.traffic.options import serving_options

HW = "h100-sxm-nvswitch"
# llama-3.1-70b on H100 80GB: TP 1 leaves no KV cache; TP 2 holds ~30.6k tokens of KV cache (1913
# blocks of 16, beside gpt-fast's math-path scores of one 2048-token chunk: 1 GiB); TP 4 ~500k. A
# 33,016-token request fits TP 4 only.
LONG = ["plan", "--model", "llama-3.1-70b", "--profiles", HW, "--schedule", "ladder", "--rate", "0.5",
        "--ttft-slo-s", "30", "--requests", "2", "--prompt-len", "33000", "--gen-len", "16", "--chunked-prefill",
        "--max-batched-tokens", "2048", "--no-progress"]


def _one_line_error(code, err, field, flags):
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and field in err and "Traceback" not in err
    named = set(re.findall(r"--[a-z][a-z-]+", err))
    assert named and named <= flags, f"{named - flags} are not plan flags: {err}"


def test_a_candidate_that_cannot_hold_the_request_is_skipped_the_others_ranked(capsys):
    code, out, err = run_cli(LONG + ["--tp", "1", "2", "4"], capsys)
    assert code == 0, err
    assert "3 configurations, 1 sustain a rate within the SLOs, 2 skipped" in out
    skipped = out[out.index("skipped ("):].splitlines()[1:3]
    assert skipped[0].startswith(f"  {HW} tp 1 ladder: memory:") and "leaves no KV cache" in skipped[0]
    assert skipped[1] == (f"  {HW} tp 2 ladder: a request of 33016 tokens needs 2064 KV-cache blocks of 16 tokens; "
                          "this replica has 1913")
    table = out[out.index("#  "):].splitlines()
    assert re.match(rf"1 +{HW} +ladder +4 ", table[2]) and not table[3].startswith("2 ")
    code, out, err = run_cli(LONG + ["--tp", "1", "2", "4", "--json"], capsys)
    assert code == 0
    assert [(r["tp"], r["requests"]) for r in json.loads(out)] == [(4, 2)]
    assert [line.split(":")[0] for line in err.splitlines()] == ["plan"] * 2
    assert err.splitlines()[1].startswith(f"plan: skipped {HW} tp 2 ladder: a request of 33016 tokens")


def test_every_candidate_skipped_is_exit_1_with_one_clear_line(capsys):
    code, out, err = run_cli(LONG + ["--tp", "1", "2"], capsys)
    assert code == 1, err
    assert out.count(f"{HW} tp ") == 2 and "Traceback" not in err
    assert out.splitlines()[-1] == ("no configuration can serve this workload: all 2 candidates skipped (a request "
                                    "beyond their KV cache or memory, or no rate within the SLOs)")
    code, out, err = run_cli(LONG + ["--tp", "1", "2", "--json"], capsys)
    assert code == 1 and json.loads(out) == []
    assert err.splitlines()[-1].startswith("plan: no configuration can serve this workload")
    # no rate within the SLOs anywhere: the SLO line, not the memory one
    code, out, _ = run_cli(["plan", "--model", "llama-3.1-8b", "--profiles", HW, "--tp", "1", "--schedule", "ladder",
                            "--rate", "1", "--ttft-slo-s", "1e-6", "--requests", "3", "--no-progress"], capsys)
    assert code == 1 and "no rate found within the SLOs" in out
    assert out.splitlines()[-1].startswith("no configuration meets the SLOs at any rate")


@pytest.mark.parametrize("extra, field", [
    # beyond one iteration's 8192 tokens without chunked prefill: no candidate could run it
    (["--prompt-len", "8000", "--gen-len", "500"], "max-batched-tokens: 8192 is below the longest request (8500"),
    (["--prompt-len", "8000", "--gen-len", "500", "--max-batched-tokens", "8499"], "max-batched-tokens: 8499"),
    (["--prompt-len", "130000", "--gen-len", "2000", "--chunked-prefill"], "prompt-len: --prompt-len 130000 + "),
    (["--requests", "1000000", "--gen-len", "4000", "--chunked-prefill"], "requests: "),
])
def test_a_workload_no_candidate_could_serve_is_one_line_naming_plan_flags(capsys, extra, field):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    flags = set(re.findall(r"--[a-z][a-z-]+", capsys.readouterr().out))
    assert {"--max-batched-tokens", "--chunked-prefill", "--prompt-len", "--requests"} <= flags
    args = ["plan", "--model", "llama-3.1-8b", "--profiles", HW, "--tp", "1", "2", "--rate", "1", "--ttft-slo-s",
            "1", "--no-progress"] + extra
    code, out, err = run_cli(args, capsys)
    _one_line_error(code, err, field, flags)
    assert out == ""


def test_check_serving_workload_leaves_the_kv_cache_to_each_candidate():
    shape = load_model_shape("llama-3.1-70b")
    load = OfferedLoad(2, LengthSpec("fixed", 33000), LengthSpec("fixed", 16))
    assert check_serving_workload(shape, serving_options(chunked_prefill=True), load, 1.0) == 33016
    with pytest.raises(UserInputError, match="max-batched-tokens"):
        check_serving_workload(shape, serving_options(), load, 1.0)
    # planned directly: TP 2 skipped with the blocks it lacks, TP 4 planned
    profile = load_profile(HW)
    plan = plan_for_rate(shape, [(HW, profile, 2, "ladder"), (HW, profile, 4, "ladder")], {HW: 2.0}, 0.5,
                         serving_options(chunked_prefill=True, ttft_slo_s=30.0, max_batched_tokens=2048), load)
    assert [(s.tp, s.reason.split(";")[0]) for s in plan.skipped] == [
        (2, "a request of 33016 tokens needs 2064 KV-cache blocks of 16 tokens")]
    assert [(o.tp, o.gpus, o.usd_per_hour, o.requests) for o in plan.options] == [(4, 4, 8.0, 2)]


def test_engine_flags_only_with_rate(capsys):
    base = ["plan", "--model", "llama-3.1-8b", "--profiles", HW, "--tp", "1", "--batch", "1", "--workers", "1",
            "--min-user-tokens-per-s", "1", "--no-progress"]
    for extra, field in ((["--max-batched-tokens", "4096"], "max-batched-tokens: only with --rate"),
                         (["--chunked-prefill"], "chunked-prefill: only with --rate")):
        code, _, err = run_cli(base + extra, capsys)
        assert code == 2 and err.count("\n") == 1 and field in err


def test_requests_per_rate_printed_and_the_defaults_explained(capsys):
    """plan --rate's 200 requests per rate tried (serving: 1000) is deliberate; every answer says it."""
    args = ["plan", "--model", "llama-3.1-8b", "--profiles", HW, "--tp", "1", "--schedule", "ladder", "--rate",
            "0.5", "--ttft-slo-s", "1", "--prompt-len", "64", "--gen-len", "8", "--no-progress"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert "(200 requests per rate tried; 8192 tokens per iteration)" in out
    code, out, _ = run_cli(args + ["--json", "--requests", "7"], capsys)
    assert code == 0 and [r["requests"] for r in json.loads(out)] == [7]
    code, out, _ = run_cli(["serving", "--model", "llama-3.1-8b", "--hardware", HW, "--tp", "1", "--rate", "0.5",
                            "--schedule", "ladder", "--prompt-len", "64", "--gen-len", "8", "--json",
                            "--no-progress"], capsys)
    assert code == 0 and json.loads(out)[0]["requests"] == 1000
    for command, words in ((["plan"], ["default 200", "serving's 1000", "every answer prints the count"]),
                           (["serving"], ["default 1000", "plan --rate defaults to 200"])):
        with pytest.raises(SystemExit):
            main(command + ["--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert all(w in text for w in words), (command, text[:200])
