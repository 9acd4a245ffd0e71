"""calibration/ladder_bench.py: sharded schedules against plain unsharded references, and the CLI.

The references below are written from the equations in ../shared/docs/ladder-residual.md with
full (unsharded) weights, complex-number RoPE and explicit softmax attention, sharing nothing
with the benchmark but the random weights.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # calibration/ is not an installed package

from calibration import ladder_bench as lb  # noqa: E402
from calibration import ladder_config as lconf  # noqa: E402
from calibration import ladder_model as lmodel  # noqa: E402
from calibration import ladder_csv as lc  # noqa: E402
from calibration import ladder_memory as lm  # noqa: E402
from laddersim.model.shape import load_model_shape  # noqa: E402
from laddersim.validation import read_measured  # noqa: E402

SEED = 7
PROMPT_LEN = 8
TOL = {"rtol": 1e-4, "atol": 1e-4}


def _write_config(path: Path, **overrides) -> Path:
    cfg = {
        "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 255,  # odd: the vocab-parallel head's last shard is padded
    }
    cfg.update(overrides)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path / "config.json"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return _write_config(tmp_path_factory.mktemp("m") / "tiny")


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 255, (2, PROMPT_LEN + 4), generator=g)  # prefill 8, decode 4


@pytest.fixture(scope="module")
def gloo2(tiny, tokens) -> dict[str, list[torch.Tensor]]:
    """Logits of every schedule from two real gloo processes (one spawn for all tests)."""
    return lb.trace_logits(str(tiny), 2, lb.SCHEDULES, tokens, PROMPT_LEN, SEED)


# ---- plain unsharded reference -------------------------------------------------------------

class Reference:
    def __init__(self, config: Path):
        self.s = load_model_shape(config)
        self.layers = [lmodel.full_layer_weights(self.s, i, SEED) for i in range(self.s.n_layers)]
        self.g = lmodel.full_global_weights(self.s, SEED)

    @staticmethod
    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(self, x):  # x [B, T, H, hd]; rotate pair (2j, 2j+1) by angle t * base^(-2j/hd)
        t, hd = x.shape[1], x.shape[-1]
        inv = 1.0 / lmodel.ROPE_BASE ** (torch.arange(0, hd, 2).float() / hd)
        rot = torch.polar(torch.ones(t, hd // 2), torch.outer(torch.arange(t).float(), inv))
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], hd // 2, 2).contiguous())
        return torch.view_as_real(xc * rot[None, :, None, :]).flatten(3)

    def attn(self, w, x):
        b, t, _ = x.shape
        h, kv, hd = self.s.n_heads, self.s.n_kv_heads, self.s.head_dim
        q = self.rope((x @ w["wq"].T).view(b, t, h, hd))
        k = self.rope((x @ w["wk"].T).view(b, t, kv, hd))
        v = (x @ w["wv"].T).view(b, t, kv, hd)
        kv_of_head = torch.arange(h) // (h // kv)
        k, v = k[:, :, kv_of_head], v[:, :, kv_of_head]
        scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
        scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        out = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v).reshape(b, t, h * hd)
        return out @ w["wo"].T

    @staticmethod
    def mlp(w, x):
        return (F.silu(x @ w["w1"].T) * (x @ w["w3"].T)) @ w["w2"].T

    def head(self, x):
        return self.norm(x, self.g["norm"]) @ self.g["output"].T

    def standard(self, tokens):
        x = self.g["tok_embeddings"][tokens]
        for w in self.layers:
            x = x + self.attn(w, self.norm(x, w["attention_norm"]))
            x = x + self.mlp(w, self.norm(x, w["ffn_norm"]))
        return self.head(x)

    def parallel(self, tokens):
        x = self.g["tok_embeddings"][tokens]
        for w in self.layers:
            n = self.norm(x, w["attention_norm"])
            x = x + self.attn(w, n) + self.mlp(w, n)
        return self.head(x)

    def ladder(self, tokens):
        # modules i = 0..2L-1; module i reads r before y_{i-1} is added; y_{i-2} added first.
        r = self.g["tok_embeddings"][tokens]
        ys = []
        for i in range(2 * self.s.n_layers):
            w = self.layers[i // 2]
            if i >= 2:
                r = r + ys[i - 2]
            if i % 2 == 0:
                ys.append(self.attn(w, self.norm(r, w["attention_norm"])))
            else:
                ys.append(self.mlp(w, self.norm(r, w["ffn_norm"])))
        return self.head(r + ys[-2] + ys[-1])


# ---- math over real gloo processes ---------------------------------------------------------

@pytest.mark.parametrize("schedule", ["standard", "parallel", "ladder"])
def test_tp2_gloo_matches_unsharded_reference(gloo2, tiny, tokens, schedule):
    expected = getattr(Reference(tiny), schedule)(tokens)
    for rank_logits in gloo2[schedule]:  # both ranks see the full, gathered vocab
        assert rank_logits.shape == (2, tokens.shape[1], 255)
        torch.testing.assert_close(rank_logits, expected, **TOL)


def test_ladder_is_a_different_model_from_standard(gloo2):
    diff = (gloo2["ladder"][0] - gloo2["standard"][0]).abs().max().item()
    assert diff > 0.05


def test_upper_bound_drops_the_allreduce_at_tp2(gloo2, tiny, tokens):
    up = gloo2["upper_bound"][0]
    assert (up - gloo2["standard"][0]).abs().max().item() > 0.05
    assert torch.isfinite(up).all()


def test_upper_bound_equals_standard_at_tp1(tiny, tokens):
    shape = load_model_shape(tiny)
    logits = {s: lb.rank_logits(shape, 0, 1, lb.Comm(), s, tokens, PROMPT_LEN, SEED)
              for s in ("standard", "upper_bound")}
    torch.testing.assert_close(logits["upper_bound"], logits["standard"], rtol=0, atol=0)
    torch.testing.assert_close(logits["standard"], Reference(tiny).standard(tokens), **TOL)


def test_replicated_kv_head_when_fewer_kv_heads_than_ranks(tmp_path, tokens):
    one_kv = _write_config(tmp_path / "mqa", num_key_value_heads=1, num_hidden_layers=2)
    got = lb.trace_logits(str(one_kv), 2, ["standard"], tokens, PROMPT_LEN, SEED)["standard"][0]
    torch.testing.assert_close(got, Reference(one_kv).standard(tokens), **TOL)


def test_kv_heads_of_rank():
    s = load_model_shape("llama-3.1-70b")  # 8 KV heads
    assert list(lmodel.kv_heads_of_rank(s, 4, 3)) == [6, 7]
    assert [list(lmodel.kv_heads_of_rank(s, 16, r)) for r in (0, 1, 2, 15)] == [[0], [0], [1], [7]]


# ---- CSV and command line ------------------------------------------------------------------

def _run_cli(*args, cwd=REPO, **extra_env):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NCCL_P2P_DISABLE")}
    env.update(extra_env)
    return subprocess.run([sys.executable, "calibration/ladder_bench.py", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


E2E_ARGS = ("--backend", "gloo", "--world-size", "2", "--batch", "1", "--prompt-len", "16",
            "--gen-len", "4", "--schedule", "standard", "--schedule", "ladder", "--repeats", "2")


@pytest.fixture(scope="module")
def e2e(tiny, tmp_path_factory):
    """One run of two gloo ranks writing a standard and a ladder row: (result, CSV, its text)."""
    out = tmp_path_factory.mktemp("e2e") / "out.csv"
    res = _run_cli(*E2E_ARGS, "--model", str(tiny), "--out", str(out), NCCL_P2P_DISABLE="1")
    return res, out, out.read_text() if out.exists() else ""


def test_cli_end_to_end_two_gloo_ranks(e2e, tiny):
    res, out, _ = e2e
    tmp_path = out.parent
    assert res.returncode == 0, res.stderr
    with open(out, newline="") as f:
        header = next(csv.reader(f))
        f.seek(0)
        rows = list(csv.DictReader(f))
    assert tuple(header) == lc.CSV_COLUMNS
    # the column order of shared/validation/ladder_70b_tp_sweep.csv
    assert ",".join(header[:9]) == "model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s"
    assert [r["schedule"] for r in rows] == ["standard", "ladder"]
    for r in rows:
        # The config by its path relative to the CSV, so validate/fit find it from anywhere.
        assert (r["model"], r["tp"], r["nodes"], r["batch"], r["prompt_len"], r["gen_len"]) == (
            os.path.relpath(Path(tiny).resolve(), tmp_path.resolve()), "2", "1", "1", "16", "4")
        assert (r["backend"], r["device"], r["dtype"], r["repeats"]) == ("gloo", "cpu", "float32", "2")
        assert r["p2p"] == "off"  # NCCL_P2P_DISABLE=1 in the environment
        prefill, decode = float(r["prefill_s"]), float(r["decode_s"])
        assert prefill > 0 and decode > 0
        assert float(r["tokens_per_s"]) == pytest.approx(4 / (prefill + decode), rel=1e-3)
    assert "ranks sampled different tokens" not in res.stderr
    # Paired rounds (one generation per measurement without --min-time-s): standard over itself
    # is 1; the ladder's speedup lies within its quartiles.
    assert [r["generations"] for r in rows] == ["1", "1"]
    assert (rows[0]["speedup"], rows[0]["speedup_q1"], rows[0]["speedup_q3"]) == ("1.0", "1.0", "1.0")
    assert float(rows[1]["speedup_q1"]) <= float(rows[1]["speedup"]) <= float(rows[1]["speedup_q3"])
    measured = read_measured(out)
    assert load_model_shape(measured["model"].iloc[0]).n_layers == load_model_shape(tiny).n_layers
    assert not (tmp_path / ".out.csv.lock").exists()  # the writer's lock goes with the run (issue 38)


def test_cli_bad_schedule_is_one_line_exit_2(tiny):
    res = _run_cli("--model", str(tiny), "--schedule", "sideways")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "--schedule" in lines[0] and all(s in lines[0] for s in lb.SCHEDULES)


@pytest.mark.parametrize("args, words", [
    (["--world-size", "0"], ["--world-size", ">= 1"]),
    (["--world-size", "3"], ["--world-size", "allowed: 1, 2, 4"]),
    (["--model", "no/such/config.json"], ["--model", "llama-3.1-70b"]),
    (["--out", "/nonexistent-dir/x.csv"], ["--out", "/nonexistent-dir/x.csv"]),
    (["--gen-len", "0"], ["--gen-len", ">= 1"]),
    (["--min-time-s", "-1"], ["--min-time-s", "between 0 and 3600"]),
])
def test_bad_input_exits_2_naming_the_flag(tiny, capsys, args, words):
    argv = ["--model", str(tiny), "--backend", "gloo", *args]
    assert lb.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert all(w in err[0] for w in words), err[0]


def test_out_with_other_columns_is_refused(tiny, tmp_path, capsys):
    out = tmp_path / "other.csv"
    out.write_text("a,b\n1,2\n")
    assert lb.main(["--model", str(tiny), "--backend", "gloo", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --out: ")
    assert str(out) in err[0] and ",".join(lc.CSV_COLUMNS) in err[0]
    assert out.read_text() == "a,b\n1,2\n"


def test_out_header_after_comment_lines_is_accepted(tmp_path):
    out = tmp_path / "commented.csv"
    out.write_text("# measured on host x\n" + ",".join(lc.CSV_COLUMNS) + "\n")
    lc.check_out_csv(str(out))  # no error
    out.write_text("# measured on host x\nmodel,tp\n")
    with pytest.raises(lb.UserInputError, match="other columns"):
        lc.check_out_csv(str(out))


def test_append_row_writes_header_once(tmp_path):
    out = tmp_path / "rows.csv"
    row = dict.fromkeys(lc.CSV_COLUMNS, 1)
    lc.append_row(str(out), row)
    lc.append_row(str(out), {**row, "schedule": "ladder"})
    lines = out.read_text().splitlines()
    assert lines[0] == ",".join(lc.CSV_COLUMNS)
    assert len(lines) == 3 and lines[2].split(",")[7] == "ladder"


ROW = dict(zip(lc.CSV_COLUMNS, ["m", 2, 1, 1, 16, 4, "on", "standard", 10.0, 0.1, 0.3,
                                "gloo", "cpu", "float32", 1, "eager"]))


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def test_append_row_starts_a_new_line_after_a_last_line_without_newline(tmp_path):
    out = tmp_path / "rows.csv"
    lc.append_row(str(out), ROW)
    out.write_bytes(out.read_bytes().rstrip(b"\r\n"))  # e.g. saved by an editor
    lc.append_row(str(out), {**ROW, "schedule": "ladder"})
    rows = _csv_rows(out)
    assert [r["schedule"] for r in rows] == ["standard", "ladder"]
    assert all(None not in r and None not in r.values() for r in rows)  # no glued or short row
    assert [r["repeats"] for r in rows] == ["1", "1"]
    assert out.read_bytes().endswith(b"\n")


def test_append_row_header_only_when_the_file_has_none(tmp_path):
    header_only = tmp_path / "header.csv"
    header_only.write_text(",".join(lc.CSV_COLUMNS))  # header, no newline
    lc.append_row(str(header_only), ROW)
    lines = header_only.read_text().splitlines()
    assert len(lines) == 2 and lines[0] == ",".join(lc.CSV_COLUMNS)
    assert lines[1].split(",")[7] == "standard"
    comments = tmp_path / "comments.csv"
    comments.write_text("# a note, no header yet\n")
    lc.append_row(str(comments), ROW)
    lines = comments.read_text().splitlines()
    assert lines[:2] == ["# a note, no header yet", ",".join(lc.CSV_COLUMNS)] and len(lines) == 3


def test_rerun_measures_only_the_missing_schedules(e2e, tiny):
    res, measured, text = e2e
    assert res.returncode == 0, res.stderr
    out = measured.with_name("resume.csv")  # beside it: the model column stays the same
    out.write_text(text)

    def rerun(*extra):
        return _run_cli(*E2E_ARGS, *extra, "--model", str(tiny), "--out", str(out),
                        NCCL_P2P_DISABLE="1")

    again = rerun("--schedule", "parallel")
    assert again.returncode == 0, again.stderr
    skipped = [line for line in again.stderr.splitlines() if "already measured" in line]
    assert len(skipped) == 2 and all(str(out) in line for line in skipped)
    assert "standard:" in skipped[0] and "ladder:" in skipped[1]
    assert out.read_text().startswith(text)  # the earlier rows are kept as they were
    assert [r["schedule"] for r in _csv_rows(out)] == ["standard", "ladder", "parallel"]
    assert len(read_measured(out)) == 3  # laddersim validate's check: no repeated setting
    after = out.read_text()
    done = rerun("--schedule", "parallel")
    assert done.returncode == 0, done.stderr
    assert "nothing to measure" in done.stderr and "built rank shards" not in done.stderr
    assert out.read_text() == after


def test_pending_schedules_keys_on_the_whole_setting(tiny, tmp_path):
    out = tmp_path / "keys.csv"
    args = lb.build_parser().parse_args(["--model", str(tiny), "--backend", "gloo", "--out", str(out)])
    cfg = lb.make_config(args, 2, check_out=True)
    assert lb.pending_schedules(cfg, 2) == lb.SCHEDULES  # new file: everything
    lc.append_row(str(out), {**ROW, **lb.setting_fields(cfg, 2), "schedule": "ladder"})
    assert lb.pending_schedules(cfg, 2) == ("standard", "parallel", "upper_bound")
    for other in ({"batch": 2}, {"prompt_len": 7}, {"gen_len": 3}, {"dtype": "bfloat16"},
                  {"p2p": "off"}, {"nodes": 2}, {"compile": True}):  # an eager row is no compiled run
        assert lb.pending_schedules(dataclasses.replace(cfg, **other), 2) == lb.SCHEDULES, other
    assert lb.pending_schedules(cfg, 1) == lb.SCHEDULES  # another TP degree


# ---- memory pre-check ----------------------------------------------------------------------

@pytest.mark.parametrize("tp, dtype, kv_heads", [
    (1, torch.float32, 2), (2, torch.float32, 2), (2, torch.bfloat16, 2), (2, torch.float32, 1),
])
def test_model_bytes_per_rank_is_what_build_model_allocates(tmp_path, tp, dtype, kv_heads):
    shape = load_model_shape(_write_config(tmp_path / "m", num_key_value_heads=kv_heads))
    model = lmodel.build_model(shape, tp - 1, tp, 3, 12, SEED, dtype=dtype)
    allocated = sum(b.numel() * b.element_size() for b in model.buffers())
    assert lm.model_bytes_per_rank(shape, tp, 3, 12, dtype.itemsize) == allocated


def test_peak_estimate_adds_to_the_model_and_grows_with_the_workload():
    s = load_model_shape("llama-3.1-8b")
    model = lm.model_bytes_per_rank(s, 2, 1, 1024 + 512, 2)
    peak = lm.peak_bytes_per_rank(s, 2, 1, 1024, 512, 2)
    assert model < peak < 1.5 * model
    assert lm.peak_bytes_per_rank(s, 2, 8, 1024, 512, 2) > peak
    assert lm.peak_bytes_per_rank(s, 4, 1, 1024, 512, 2) < peak
    # Why the 405B test below fails everywhere: its fp32 weights alone are > 800 GB per rank at TP=2.
    assert lm.model_bytes_per_rank(load_model_shape("llama-3.1-405b"), 2, 1, 1, 4) > 800e9


def test_check_memory_counts_every_local_rank(tiny, monkeypatch):
    args = lb.build_parser().parse_args(["--model", str(tiny), "--backend", "gloo"])
    cfg = lb.make_config(args, 2, check_out=False)
    per_rank = lm.peak_bytes_per_rank(load_model_shape(tiny), 2, cfg.batch, cfg.prompt_len,
                                      cfg.gen_len, 4)
    cpu = torch.device("cpu")
    monkeypatch.setattr(lconf, "available_host_bytes", lambda: 2 * per_rank)
    lb.check_memory(cfg, 2, cpu, 2)  # fits exactly
    monkeypatch.setattr(lconf, "available_host_bytes", lambda: 2 * per_rank - 1)
    with pytest.raises(lb.UserInputError, match=r"x 2 ranks on this host"):
        lb.check_memory(cfg, 2, cpu, 2)
    monkeypatch.setattr(lconf, "available_host_bytes", lambda: None)  # unknown: no check
    lb.check_memory(cfg, 2, cpu, 2)


@pytest.mark.skipif(lm.available_host_bytes() is None, reason="the host's available memory cannot be read here")
def test_model_too_large_for_the_host_exits_2_before_allocating(tmp_path):
    out = tmp_path / "big.csv"
    res = _run_cli("--model", "llama-3.1-405b", "--backend", "gloo", "--world-size", "2",
                   "--out", str(out))
    assert res.returncode == 2  # not OOM-killed: nothing was allocated
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --model: llama-3.1-405b at tp=2, batch=1")
    assert "GiB" in lines[0] and "available" in lines[0]
    assert "smaller model" in lines[0] and "config.json" in lines[0]
    assert not out.exists()  # no empty file left behind


@pytest.mark.parametrize("whole_group", [True, False], ids=["ctrl-c", "sigint-to-parent"])
def test_ctrl_c_keeps_the_rows_written_and_says_so_once(tmp_path, tiny, whole_group):
    # Ctrl-C reaches the whole process group (parent and spawned ranks); a job runner may signal
    # the parent alone. Either way: the ranks are stopped, one line, exit 130, no traceback, and
    # the rows already in --out untouched. A first run writes the standard row; the second skips
    # it and is interrupted while it measures ladder.
    out, log = tmp_path / "out.csv", tmp_path / "stderr.txt"
    common = ["--backend", "gloo", "--world-size", "2", "--model", str(tiny), "--batch", "1",
              "--prompt-len", "16", "--gen-len", "32", "--schedule", "standard", "--out", str(out)]
    assert _run_cli(*common, "--repeats", "1").returncode == 0
    before = out.read_text()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "calibration/ladder_bench.py", *common, "--schedule", "ladder",
                                 "--repeats", "100000"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=err, text=True, start_new_session=True)
        try:
            for _ in range(1200):  # until ladder is being measured (at most 120 s)
                if "ladder: warmup" in log.read_text() or proc.poll() is not None:
                    break
                time.sleep(0.1)
            assert proc.poll() is None, log.read_text()
            ranks = _children(proc.pid)
            assert len(ranks) == 2
            if whole_group:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                os.kill(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
            assert not [pid for pid in ranks if _alive(pid)], "a rank outlived the run"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text()
    assert proc.returncode == 130, text
    assert "Traceback" not in text and "standard: already measured" in text
    assert text.strip().splitlines()[-1] == "interrupted: no row written by this run"
    assert out.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "stderr.txt"]  # no .out.csv.lock left


def _children(pid: int) -> list[int]:
    """The spawned ranks of ``pid``: its children running multiprocessing's spawn_main (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if parent == pid and b"spawn_main" in command:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Running (not a zombie awaiting its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sample_picks_within_top_k():
    logits = torch.arange(10.0).repeat(3, 1)[:, None, :]  # [B=3, S=1, V=10]
    torch.manual_seed(0)
    picks = torch.cat([lb.sample(logits, 1.0, 2) for _ in range(50)])
    assert set(picks.flatten().tolist()) == {8, 9}


# ---- the paper's benchmark model and its variants --------------------------------------------

def test_every_variant_computes_the_reference_logits(tiny, tokens):
    """Fused gate/up (one GEMM, chunk(2)) and math attention, the paper's, and upstream gpt-fast's
    two GEMMs with torch's attention backend: the same numbers, the unsharded reference's."""
    shape = load_model_shape(tiny)
    ref = Reference(tiny).standard(tokens)
    for variant in (lmodel.PAPER, lmodel.Variant(mlp="split", sdpa="default"), lmodel.Variant(mlp="split")):
        got = lb.rank_logits(shape, 0, 1, lb.Comm(), "standard", tokens, PROMPT_LEN, SEED, variant=variant)
        torch.testing.assert_close(got, ref, **TOL)


def _profiled_ops(fn) -> list[str]:
    from torch.profiler import profile

    with torch.no_grad(), profile() as prof:
        fn()
    return [e.name for e in prof.events()]


@pytest.mark.parametrize("mlp, linears, sdpa, math_path", [
    ("fused", 1, "math", True), ("split", 2, "default", False),
])
def test_the_variants_run_their_own_kernels(tiny, mlp, linears, sdpa, math_path):
    """The paper's MLP is one linear for gate and up, chunked; its attention the math SDPA path
    (what torch.compile then lowers into generated kernels). The variants: two linears, and torch's
    own backend choice (on CPU its flash kernel)."""
    shape = load_model_shape(tiny)
    model = lmodel.build_model(shape, 0, 1, 2, 16, SEED, variant=lmodel.Variant(mlp=mlp, sdpa=sdpa))
    block = model.layers[0]
    x = torch.randn(2, 1, shape.dim)
    ops = _profiled_ops(lambda: block.gate_up(x))
    assert ops.count("aten::linear") == linears and ("aten::chunk" in ops) == (mlp == "fused")
    q = torch.randn(2, block.n_head, 3, block.head_dim)
    ops = _profiled_ops(lambda: block.attention_core(q, model.causal_mask[None, None, torch.arange(3)]))
    assert ("aten::_scaled_dot_product_attention_math" in ops) == math_path
    # K and V of the whole static cache, repeated to every query head
    assert ops.count("aten::repeat_interleave") >= 2


def test_compiled_static_prefill_matches_the_eager_one(tiny):
    """The paper's prefill, compiled with static shapes (dynamic=False) through the math attention,
    computes the eager prefill's logits (CPU twin: Inductor's C++ kernels)."""
    from calibration import ladder_forward as lf

    shape = load_model_shape(tiny)
    model = lmodel.build_model(shape, 0, 1, 2, 16, SEED)
    prompt = torch.randint(0, shape.vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(6)

    def logits(prompt, pos):
        return lf.forward(model, prompt, pos, "standard", lb.Comm(), True)

    with torch.no_grad():
        eager = logits(prompt, pos)
        torch._dynamo.reset()
        compiled = lf.compile_prefill(logits)(prompt, pos)
    torch.testing.assert_close(compiled, eager, **TOL)


def _config(tiny, *flags):
    args = lb.build_parser().parse_args(["--model", str(tiny), "--backend", "gloo", *flags])
    return lb.make_config(args, 2, check_out=False)


@pytest.mark.parametrize("flags, mode, prefill_compiled", [
    ([], "eager", False),  # the CPU twin's default
    (["--compile"], "compile", True),  # the paper's: decode and prefill compiled
    (["--compile", "--eager-prefill"], "compile+eager-prefill", False),
    (["--compile", "--eager-prefill", "--mlp", "split", "--sdpa", "default", "--prefill-logits", "last"],
     "compile+eager-prefill+split-mlp+default-sdpa+last-logits", False),  # what --compile ran before
    (["--mlp", "split"], "eager+split-mlp", False),
])
def test_the_mode_column_names_the_configuration(tiny, flags, mode, prefill_compiled):
    cfg = _config(tiny, *flags)
    assert (lconf.mode_field(cfg), cfg.compile_prefill, cfg.dtype) == (mode, prefill_compiled, "float32")
    assert lb.setting_fields(cfg, 2)["mode"] == mode


def test_a_variant_is_another_measurement(tiny, tmp_path):
    out = tmp_path / "out.csv"
    cfg = dataclasses.replace(_config(tiny), out=str(out))
    lc.append_row(str(out), {**ROW, **lb.setting_fields(cfg, 2), "schedule": "standard"})
    assert "standard" not in lb.pending_schedules(cfg, 2)
    split = dataclasses.replace(cfg, variant=lmodel.Variant(mlp="split"))
    assert "standard" in lb.pending_schedules(split, 2)


def test_eager_prefill_without_compile_is_one_line(tiny, capsys):
    assert lb.main(["--model", str(tiny), "--backend", "gloo", "--no-compile", "--eager-prefill"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --eager-prefill: ")


def test_the_static_cache_and_the_math_attention_in_the_memory_estimate():
    assert [lm.static_cache_len(p, g) for p, g in ((1024, 512), (100, 7), (8, 8))] == [1536, 112, 16]
    shape = load_model_shape("llama-3.1-8b")
    # the prefill's attention scores, one per query head over the whole cache, and their softmax
    extra = lm.peak_bytes_per_rank(shape, 1, 64, 1024, 512, 2) - lm.peak_bytes_per_rank(shape, 1, 64, 1024, 512, 2,
                                                                                          math_attention=False)
    assert extra == pytest.approx(2 * 64 * 32 * 1024 * 1536 * 2 * (1 + lm.MEMORY_MARGIN), rel=1e-6)
    # and the prefill's logits of every prompt position (the paper's), this rank's slice and the gathered whole
    extra = lm.peak_bytes_per_rank(shape, 8, 64, 1024, 512, 2) - lm.peak_bytes_per_rank(shape, 8, 64, 1024, 512, 2,
                                                                                          all_logits=False)
    assert extra == pytest.approx(64 * 1024 * (128256 // 8 + 128256) * 2 * (1 + lm.MEMORY_MARGIN), rel=1e-6)


def test_the_prefill_computes_every_positions_logits_unless_asked_for_the_last(tiny):
    """gpt-fast's Transformer.forward: the prefill's LM head over every prompt position (the
    paper's); --prefill-logits last: the last position's alone. The same first token either way."""
    from torch.profiler import profile

    from calibration import ladder_forward as lf

    shape = load_model_shape(tiny)
    model = lmodel.build_model(shape, 0, 1, 2, 16, SEED)
    prompt = torch.randint(0, shape.vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))
    tokens, head_rows = {}, {}
    for logits in lf.PREFILL_LOGITS:
        torch.manual_seed(0)
        with torch.no_grad(), profile(record_shapes=True) as prof:
            tokens[logits] = lf.prefill(model, prompt, torch.arange(6), "standard", lb.Comm(), 0.8, 200, logits)
        linears = [e for e in prof.events() if e.name == "aten::linear"]
        head_rows[logits] = linears[-1].input_shapes[0][:2]  # the LM head: the last linear of the pass
        assert linears[-1].input_shapes[1] == list(model.output.shape)
    assert head_rows == {"all": [2, 6], "last": [2, 1]}
    assert torch.equal(tokens["all"], tokens["last"])
