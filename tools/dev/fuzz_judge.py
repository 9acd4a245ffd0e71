"""The fuzzer's judge (tools/dev/fuzz_inputs.py): why an exit 0 produced nonsense (non-finite,
non-positive or absurd results, or serving and planning answers that contradict themselves), or
None where the results are sane."""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from fuzz_file_cases import Case


def _finite_positive(values) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values)


def _sourced_numbers(tree):
    if isinstance(tree, dict):
        if set(tree) >= {"value", "source"} and isinstance(tree["value"], (int, float)):
            yield tree["value"]
        for v in tree.values():
            yield from _sourced_numbers(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _sourced_numbers(v)


def _no_constant(name: str):
    raise ValueError(f"non-finite number {name} in JSON output")


def _all_numbers(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _all_numbers(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _all_numbers(v)
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        yield tree


def _serving_row_nonsense(row: dict) -> str | None:
    """A serving row's figures contradicting themselves (or being non-finite/negative), or None."""
    for v in _all_numbers(row):
        if not math.isfinite(v) or v < 0:
            return f"serving: figure {v} in {row.get('schedule')}"
    for name in ("ttft", "tpot", "e2e"):
        ps = [row.get(f"{name}_p{p}_s") for p in (50, 90, 99)]
        if None not in ps and not ps[0] <= ps[1] + 1e-12 <= ps[2] + 2e-12:
            return f"serving: {name} percentiles out of order {ps}"
    if row.get("offered_rate") is not None and row.get("goodput_req_per_s") is not None \
            and row["goodput_req_per_s"] > row["offered_rate"] * (1 + 1e-9):
        return "serving: goodput above the offered rate"
    if not 0 <= row.get("slo_attainment", 0) <= 1:
        return "serving: attainment outside [0, 1]"
    if "capacity_req_per_s" in row and row.get("rate"):
        cap, passed = row["capacity_req_per_s"], row["slo_attainment"] >= row["slo_attainment_required"]
        if passed and (cap is None or cap < row["rate"] * (1 - 1e-9)):
            return f"serving: the offered {row['rate']} req/s met the SLOs but the capacity is {cap}"
        if not passed and cap is not None and cap >= row["rate"] * (1 + 1e-9) and not row.get("capacity_at_least"):
            return f"serving: the offered {row['rate']} req/s missed the SLOs but the capacity is {cap}"
        if row.get("replicas") is not None and cap and row["replicas"] * cap < row["target_rate"] * (1 - 1e-9):
            return "serving: replicas x capacity below the target rate"
    return None


def _serving_nonsense(case: Case, work: Path, stdout: str) -> str | None:
    if case.argv[0] == "serving" and "--json" in case.argv:
        for row in json.loads(stdout, parse_constant=_no_constant):
            why = _serving_row_nonsense(row)
            if why:
                return why
    if case.argv[0] == "plan" and "--json" in case.argv:
        rate = float(case.argv[case.argv.index("--rate") + 1]) if "--rate" in case.argv else None
        for row in json.loads(stdout, parse_constant=_no_constant):
            if not all(math.isfinite(v) and v >= 0 for v in _all_numbers(row)):
                return f"plan: non-finite or negative figure in {row}"
            if rate and row["replicas"] * row["capacity_req_per_s"] < rate * (1 - 1e-9):
                return "plan: replicas x capacity below --rate"
    if case.check == "sweep" and (work / "sw" / "results.csv").exists():
        text = (work / "sw" / "results.csv").read_text()
        if any(word in ("inf", "-inf", "nan", "infinity") for word in
               text.lower().replace(",", " ").split()):
            return "sweep: results.csv holds inf/nan"
    return None


def _nonsense(case: Case, work: Path, stdout: str) -> str | None:
    """Why exit 0 produced nonsense, or None."""
    why = _serving_nonsense(case, work, stdout)
    if why:
        return why
    if case.check == "json" and case.argv[0] == "simulate" and "--json" in case.argv:
        rows = json.loads(stdout)
        for row in rows:
            if not _finite_positive([row["tokens_per_s"], row["total_s"], row["decode_s"], row["prefill_s"]]):
                return f"simulate: non-finite or non-positive result {row}"
    if case.check == "profile":
        run = work / case.argv[case.argv.index("--out") + 1] if "--out" in case.argv else work / case.argv[2]
        tree = yaml.safe_load((run / "profile.yaml").read_text())
        for v in _sourced_numbers(tree):
            if not math.isfinite(v) or abs(v) > 1e9:
                return f"profile: value {v} is not plausible"
    if case.check == "sweep":
        import pandas as pd

        frame = pd.read_csv(work / "sw" / "results.csv")
        ok = frame[frame["status"] == "ok"]
        if "rate" in frame.columns:  # serving points: latencies and throughput instead of tokens/s
            if not _finite_positive(ok["throughput_tokens_per_s"].tolist() + ok["ttft_p50_s"].tolist()):
                return "sweep: ok serving rows with non-finite or non-positive throughput or TTFT"
        elif not _finite_positive(ok["tokens_per_s"].tolist()):
            return "sweep: ok rows with non-finite or non-positive tokens/s"
    if case.check == "validation":
        import pandas as pd

        frame = pd.read_csv(work / "rep" / "validation.csv")
        if not _finite_positive(frame["predicted_tokens_per_s"].tolist()):
            return "validate: non-finite predictions"
    if case.argv[0] == "fit":
        target = Path(case.argv[case.argv.index("--out") + 1]) if "--out" in case.argv else None
        for path in [work / target] if target else []:
            path = path if path.suffix in (".yaml", ".yml") else path / "profile.yaml"
            if path.exists():
                for v in _sourced_numbers(yaml.safe_load(path.read_text())):
                    if not math.isfinite(v) or abs(v) > 1e9:
                        return f"fit: value {v} is not plausible"
    elif case.argv[0] in ("simulate", "plan", "serving") and any(
            word.strip(",") in ("nan", "inf", "-inf", "infinity") for word in stdout.lower().split()):
        return "output shows nan/inf"
    return None
