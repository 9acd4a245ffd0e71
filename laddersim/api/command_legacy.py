"""``plan`` and ``serving`` (being moved)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.api.common import listed as _listed
from laddersim.choices import DEFAULT_SCHEDULES
from laddersim.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model_shape import ModelShape


def _flags(values: dict) -> list[str]:
    """Command-line words for keyword arguments: None and False are left out, True is a bare flag,
    a list gives its values after one flag."""
    words: list[str] = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            words.append(flag)
        elif isinstance(value, (list, tuple)):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return words


def _command(argv: list[str]):
    """The command's parsed arguments; a usage error raises UserInputError with its one line."""
    from laddersim.cli import build_parser
    from laddersim.errors import UserInputError

    parser = build_parser(argv)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parser.parse_args(argv)
    except SystemExit:
        message = stderr.getvalue().strip().splitlines()
        raise UserInputError(message[-1].removeprefix("error: ") if message else f"invalid arguments: {argv}") \
            from None


def _command_json(argv: list[str]) -> list:
    """Run a command with ``--json --no-progress``; its JSON answer (a list of objects)."""
    args = _command([*argv, "--json", "--no-progress"])
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        args.func(args)
    return json.loads(stdout.getvalue() or "[]")


def plan(model: str | Path, *, profiles: Sequence[str] | None = None, prices: str | Path | None = None,
         schedules: Sequence[str] = DEFAULT_SCHEDULES, batches: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
         tps: Sequence[int] | None = None, max_nodes: int = 4, prompt_len: int = DEFAULT_PROMPT_LEN,
         gen_len: int = DEFAULT_GEN_LEN, dtype: str = "bfloat16", kv_cache: str = "static",
         min_user_tokens_per_s: float | None = None, min_total_tokens_per_s: float | None = None,
         max_token_latency_ms: float | None = None, rate: float | None = None, ttft_slo_s: float | None = None,
         tpot_slo_s: float | None = None, requests: int = 200, rank_by: str | None = None, top: int = 10,
         workers: int | None = None) -> pd.DataFrame:
    """``laddersim plan``: the cheapest deployments (profile, TP, nodes, replicas, schedule, batch)
    meeting a target, ranked, one row per option (``plan --json``'s objects: ``usd_per_hour``,
    ``usd_per_million_tokens``, ``tpot_s``, ``user_tokens_per_s``, ``total_tokens_per_s``, ...);
    empty when none meets it.

    Decode steady state: the targets are ``min_user_tokens_per_s`` (per user),
    ``min_total_tokens_per_s`` (all replicas) and ``max_token_latency_ms``. With ``rate`` (requests
    per second) and ``ttft_slo_s`` (and optionally ``tpot_slo_s``), deployments are ranked by what
    serving that rate within the SLOs costs instead (a continuous-batching simulation of
    ``requests`` requests per rate tried). ``profiles``: candidate profiles (default every shipped
    one with a price in ``prices``); ``batches``: batch sizes (concurrent users per replica); ``tps``:
    TP degrees (default all valid); ``workers``: processes (default all cores)."""
    import pandas as pd

    argv = ["plan", "--model", str(model)] + _flags({
        "profiles": _listed(profiles), "prices": prices, "schedule": _listed(schedules),
        "batch": _listed(batches), "tp": _listed(tps),
        "max_nodes": max_nodes, "prompt_len": prompt_len, "gen_len": gen_len, "dtype": dtype, "kv_cache": kv_cache,
        "min_user_tokens_per_s": min_user_tokens_per_s, "min_total_tokens_per_s": min_total_tokens_per_s,
        "max_token_latency_ms": max_token_latency_ms, "rate": rate, "ttft_slo_s": ttft_slo_s,
        "tpot_slo_s": tpot_slo_s, "requests": requests, "rank_by": rank_by, "top": top, "workers": workers})
    return pd.DataFrame(_command_json(argv))


