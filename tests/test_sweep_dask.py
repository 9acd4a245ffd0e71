"""The ``--scheduler`` path on a local Dask cluster gives the same table as local cores."""

from __future__ import annotations

# The dev extra installs dask[distributed]; without it this test fails rather than skips.
from dask import distributed

from laddersim.cli import main
from laddersim.sweeps import run_sweep
from laddersim.sweeps.grid import parse_grid

GRID = {"models": ["llama-3.1-8b", "llama-3.1-70b"], "hardware": ["h100-sxm-nvswitch"], "tp": [1, 8],
        "batch": [1, 16], "prompt_len": [256], "gen_len": [32], "schedules": ["standard", "ladder"],
        "overrides": {"inter_bandwidth_scale": [1.0], "comm_slowdown": [0.0, 0.2]}}


def test_dask_cluster_gives_the_local_table(tmp_path, capsys):
    local = run_sweep(parse_grid(GRID), tmp_path / "local", workers=1, progress=False)
    assert set(local.frame.status) == {"ok", "infeasible"}  # 70B at TP 1 does not fit
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        report = run_sweep(parse_grid(GRID), tmp_path / "dask", scheduler=cluster.scheduler_address,
                           progress=False)
        assert report.computed == len(local.frame) == 32
        for name in ("results.csv", "results.parquet"):
            assert (tmp_path / "dask" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
        # The CLI flag reaches the same cluster; everything is already stored.
        argv = ["sweep", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
                "--batch", "1", "16", "--prompt-len", "256", "--gen-len", "32", "--comm-slowdown", "0", "0.5",
                "--out", str(tmp_path / "cli"), "--scheduler", cluster.scheduler_address, "--no-progress"]
        assert main(argv) == 0
        assert "8 points (8 computed, 0 reused): ok 8" in capsys.readouterr().out


def test_unreachable_scheduler_is_a_user_error(tmp_path, capsys, monkeypatch):
    from laddersim.sweeps import runner

    monkeypatch.setattr(runner, "CONNECT_TIMEOUT_S", 1.0)
    argv = ["sweep", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
            "--out", str(tmp_path), "--scheduler", "tcp://127.0.0.1:1", "--no-progress"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: scheduler: cannot connect to 'tcp://127.0.0.1:1'")


def test_an_unreachable_scheduler_is_one_clean_line_beside_the_progress_bar(tmp_path, capsys, monkeypatch):
    """Issue 38: with the progress bar on, the connection error was printed inside the bar's line
    ("sweep:   0%| ... error: scheduler: ..."): it is now raised before the bar is drawn."""
    from laddersim.sweeps import runner

    monkeypatch.setattr(runner, "CONNECT_TIMEOUT_S", 1.0)
    argv = ["sweep", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
            "--out", str(tmp_path), "--scheduler", "tcp://127.0.0.1:1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: scheduler: cannot connect to 'tcp://127.0.0.1:1'") and err.count("\n") == 1
    assert "sweep:" not in err and "\r" not in err
