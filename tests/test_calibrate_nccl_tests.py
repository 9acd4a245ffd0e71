"""import-nccl-tests on all_reduce_perf logs rebuilt from published tables
(tests/data/nccl_tests_logs/rebuild.py from reference_data/nccl_tests/ in LADDERSIM_SHARED, see PROVENANCE.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from laddersim.measure.environment import write_manifest
from laddersim.fitting.profile_from_run import fit_run
from laddersim.fitting.nccl_tests import MIN_BANDWIDTH_BYTES, import_logs, parse_log
from laddersim.measure.schema import SCHEMAS
from laddersim.measure.store import PointStore, measurement_path
from laddersim.profiles_check.sources import reference_data_root
from laddersim.cli import main
from laddersim.costs.allreduce import allreduce_time_s
from laddersim.costs.collectives import alpha_beta_time_s
from laddersim.hardware import load_profile
from laddersim.profiles_check.compare import check_allreduce

LOGS = Path(__file__).parent / "data" / "nccl_tests_logs"
ONE_NODE = LOGS / "aws_p5_h100_1node_nvswitch.log"
TWO_NODE = LOGS / "aws_p5_h100_2node_efa3200.log"
TEN_NODE = LOGS / "h100_cluster_10node_8gpn_net400.log"
REFERENCE = (reference_data_root() or Path("/nonexistent")) / "nccl_tests"  # LADDERSIM_SHARED names them

# (size_bytes, out-of-place time_us) rows copied from the published tables (PROVENANCE.md):
# aws_p5_h100_1node_nvswitch.csv rows 1, 18, 32; aws_p5_h100_2node_efa3200.csv rows 1, 18, 32.
CITED = {
    ONE_NODE: (8, 1, [(8, 12.9), (1048576, 28.56), (2147483648, 8463.7)]),
    TWO_NODE: (16, 2, [(8, 69.12), (1048576, 123.2)]),
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("p5")
    profile = import_logs([str(ONE_NODE), str(TWO_NODE), str(TEN_NODE)], str(out), "p5-import",
                          "h100-sxm-nvswitch")
    return out, profile


@pytest.mark.parametrize("log_path", list(CITED))
def test_parsed_log_has_the_published_ranks_nodes_and_times(log_path):
    ranks, nodes, rows = CITED[log_path]
    log = parse_log(log_path)
    assert (log.world_size, log.nodes, log.ranks_per_node, log.iters, log.graph) == (ranks, nodes, 8, 20, False)
    assert log.device_name == "NVIDIA H100 80GB HBM3"
    parsed = {r.size_bytes: r.time_us for r in log.rows}
    for size, time_us in rows:
        assert parsed[size] == time_us
    assert parse_log(TEN_NODE).version == "2.29.2"


@pytest.mark.skipif(not REFERENCE.exists(), reason="the original nccl-tests logs are not named (LADDERSIM_SHARED)")
@pytest.mark.parametrize("log_path", [ONE_NODE, TWO_NODE, TEN_NODE])
def test_every_parsed_row_equals_the_reference_table(log_path):
    table = pd.read_csv(REFERENCE / log_path.name.replace(".log", ".csv"))
    log = parse_log(log_path)
    assert [r.size_bytes for r in log.rows] == table["size_bytes"].tolist()
    np.testing.assert_allclose([r.time_us for r in log.rows], table["time_us"], rtol=1e-4)
    np.testing.assert_allclose([r.time_us_inplace for r in log.rows], table["time_us_inplace"], rtol=1e-4)
    np.testing.assert_allclose([r.busbw_gbps for r in log.rows], table["busbw_GBps"], atol=0.006)


@pytest.mark.parametrize("log_path, tp", [(ONE_NODE, 8), (TWO_NODE, 16), (TEN_NODE, 80)])
def test_profile_allreduce_time_reproduces_the_log(imported, log_path, tp):
    """Within the table: exact at measured sizes (tolerance 1e-6, CSV rounding to 6 digits) and,
    between them, inside the bracket of the two neighbouring measurements. Across nodes a row
    faster than a smaller message's is noise: the running maximum of the rows is reproduced."""
    out, profile = imported
    loaded = load_profile(out)  # what `simulate --hardware DIR` sees
    log = parse_log(log_path)
    sizes = np.array([r.size_bytes for r in log.rows], float)
    times_s = np.array([r.time_us for r in log.rows]) * 1e-6
    if log.nodes > 1:
        times_s = np.maximum.accumulate(times_s)
    np.testing.assert_allclose(allreduce_time_s(loaded, tp, sizes), times_s, rtol=1e-6)
    mid = np.sqrt(sizes[1:] * sizes[:-1])
    between = allreduce_time_s(loaded, tp, mid)
    assert np.all(between >= np.minimum(times_s[1:], times_s[:-1]) * (1 - 1e-9))
    assert np.all(between <= np.maximum(times_s[1:], times_s[:-1]) * (1 + 1e-9))


def test_fitted_intra_node_alpha_beta_follows_the_single_node_curve(imported):
    """The ring alpha-beta line (used where no table covers the shape) stays within a factor 1.75
    of the AWS p5 8-GPU curve from 8 B to 2 GiB and within 15% at the median size. A line cannot
    follow the measured knee: the worst point is 2 MiB (model 0.59x: latency plateau to ~512 KiB,
    then NCCL switches protocol), the largest sizes are 1.17x (busbw still rising at 2 GiB)."""
    _, profile = imported
    log = parse_log(ONE_NODE)
    sizes = np.array([r.size_bytes for r in log.rows], float)
    measured = np.array([r.time_us for r in log.rows]) * 1e-6
    ratio = alpha_beta_time_s(profile.collectives.intra_node, 8, sizes) / measured
    assert np.all(np.abs(np.log(ratio)) < np.log(1.75))
    assert np.median(np.abs(ratio - 1)) < 0.15
    assert "fit: calibration run" in profile.collectives.intra_node.bus_bandwidth_gb_per_s.source


def test_imported_profile_says_where_every_number_came_from(imported):
    out, profile = imported
    assert profile.collectives.tables[0].library == "NCCL 2.29.2"
    assert profile.node.gpus_per_node == 8
    assert profile.gpu.peak_tflops.source.startswith("copied from base profile h100-sxm-nvswitch")
    assert "80x10" in profile.network.allreduce.bus_bandwidth_gb_per_s.source  # fitted to the multi-node logs
    header = (out / "tables" / "allreduce.csv").read_text().splitlines()[:4]
    assert any("measurements/allreduce.csv" in line for line in header)
    assert "aws_p5_h100_1node_nvswitch.log" in profile.provenance["logs"]


def test_old_format_without_root_and_group_columns(tmp_path):
    log = tmp_path / "old.log"
    log.write_text(
        "# nThread 1 nGpus 2 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 50 validation: 1\n"
        "#   Rank  0 Pid   4242 on      hostA device  0 [0x1a] Tesla V100-SXM2-16GB\n"
        "#   Rank  1 Pid   4242 on      hostA device  1 [0x1b] Tesla V100-SXM2-16GB\n"
        "        1024           256     float     sum    10.50    0.10    0.10  0e+00    10.40    0.10    0.10  0e+00\n"
        "        2048           512     float     sum    11.00    0.19    0.19  0e+00    10.90    0.19    0.19  0e+00\n")
    parsed = parse_log(log)
    assert (parsed.world_size, parsed.nodes, parsed.iters) == (2, 1, 50)
    assert [(r.size_bytes, r.time_us) for r in parsed.rows] == [(1024, 10.5), (2048, 11.0)]


def test_cli_rejects_a_log_without_data_in_one_line(tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text("# nThread 1 nGpus 8\nsomething else\n")
    proc = subprocess.run([sys.executable, "-m", "laddersim", "calibrate", "import-nccl-tests", str(bad),
                           "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: log: {bad}: no all_reduce_perf data lines found"


# ---- timing label: nccl-tests times a back-to-back loop, so no host launch is in its rows -------

def test_imported_tables_are_eager_loops_simulated_without_a_launch(imported):
    """nccl-tests averages ``iters`` back-to-back calls (each launch hidden behind the previous
    collective), as the shipped profiles label their nccl-tests tables (mode eager, timing loop).
    Labelled ``single`` the check added eager_launch_us (16 us) to every modelled row."""
    _, profile = imported
    assert [(t.mode, t.timing) for t in profile.collectives.tables] == [("eager", "loop")]
    assert profile.collectives.mode == "graph"  # the regime a loop table measures: no launch added
    assert profile.collectives.eager_launch_us.value == 16.0  # copied from the base, not applied


@pytest.mark.parametrize("logs", [[ONE_NODE], [ONE_NODE, TWO_NODE, TEN_NODE]], ids=["1node", "1-2-10node"])
def test_profiles_check_of_an_imported_profile_matches_its_own_rows(tmp_path, logs):
    """`profiles check` of the import compares the table with the rows it was built from: before
    the fix, the 1-node import had table median 56%, worst 95.5% (launch added to every row)."""
    import_logs([str(p) for p in logs], str(tmp_path / "imp"), "imp", "h100-sxm-nvswitch")
    checks = check_allreduce(load_profile(tmp_path / "imp"))
    assert {(c.gpus, c.nodes) for c in checks} >= {(8, 1)}
    for check in checks:
        assert len(check.rows) > 0
        assert check.table_median < 0.01 and check.table_worst < 0.03, (check.gpus, check.nodes)


def test_profiles_check_cli_on_an_imported_profile(tmp_path, capsys):
    out = tmp_path / "awsp5"
    assert main(["calibrate", "import-nccl-tests", str(ONE_NODE), "--out", str(out)]) == 0
    capsys.readouterr()
    main(["profiles", "check", str(out)])
    line = next(row for row in capsys.readouterr().out.splitlines() if row.startswith("allreduce"))
    assert "eager/loop" in line
    table_median, table_worst = [float(v.rstrip("%")) for v in line.split()[7:9]]
    assert table_median < 1.0 and table_worst < 3.0  # percent


def _eager_run(run_dir: Path, source: str | None) -> None:
    """A hand-made single-node eager run: 8 ranks, a latency floor plus 400 GB/s busbw."""
    (run_dir / "measurements").mkdir(parents=True)
    store = PointStore(measurement_path(run_dir, "allreduce"), SCHEMAS["allreduce"])
    for size in (1024, 65536, 1 << 20, 1 << 24, 1 << 28):
        store.append({"world_size": 8, "group_size": 8, "nodes": 1, "dtype": "bfloat16", "mode": "eager",
                      "size_bytes": size, "reps": 20, "stat": "median",
                      "time_us": 30.0 + 2 * 7 / 8 * size / 400e3, "p10_us": None, "p90_us": None,
                      "min_us": None, "max_us": None})
    manifest = {"backend": "nccl", "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "world_size": 8,
                "ranks_per_node": 8, "nodes": 1, "nccl": "2.21.5", "modes": ["eager"]}
    write_manifest(run_dir, {**manifest, **({"source": source} if source else {})})


@pytest.mark.parametrize("source, timing, regime", [(None, "single", "eager"), ("nccl-tests", "loop", "graph")])
def test_calibrate_run_eager_points_stay_single_calls(tmp_path, source, timing, regime):
    """`calibrate run` times one eager AllReduce after a barrier with CUDA events around it
    (calibration/allreduce_bench.py), so its eager table holds the launch (single, simulated
    eager, as measured); only an nccl-tests import is a loop. Either way simulate reproduces the
    table exactly (no launch added or removed)."""
    _eager_run(tmp_path / "run", source)
    profile = fit_run(str(tmp_path / "run"), "run", "h100-sxm-nvswitch")
    assert [(t.mode, t.timing) for t in profile.collectives.tables] == [("eager", timing)]
    assert profile.collectives.mode == regime
    sizes = np.array([1024.0, 1 << 24])
    np.testing.assert_allclose(allreduce_time_s(load_profile(tmp_path / "run"), 8, sizes) * 1e6,
                               30.0 + 2 * 7 / 8 * sizes / 400e3, rtol=1e-5)
    # profiles check compares the table with its own rows in their regime: no launch added
    # (a single-timed table of an eager-simulated profile missed itself by the 16 us launch).
    for check in check_allreduce(load_profile(tmp_path / "run")):
        assert check.table_worst < 1e-6


# ---- logs that are not usable AllReduce data: exit 2, one line naming the field ----------------

def _refused(tmp_path, capsys, log: Path, *words: str) -> str:
    capsys.readouterr()
    assert main(["calibrate", "import-nccl-tests", str(log), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: log: {log}"), err
    for word in words:
        assert word in err[0], (word, err[0])
    assert not (tmp_path / "o" / "profile.yaml").exists()
    return err[0]


def test_refuses_an_all_gather_log_by_its_header(tmp_path, capsys):
    _refused(tmp_path, capsys, LOGS / "refuse_all_gather_perf.log", "all_gather_perf", "all_reduce_perf")


ROW = ("{size:>12}  {count:>12}     float  {redop:>6}  {root:>6}"
       "    20.00   52.43   45.88      0    20.00   52.43   45.88      0\n")


def _log(tmp_path: Path, rows: list[dict], ranks: int = 8, header: str = "") -> Path:
    path = tmp_path / "hand.log"
    path.write_text(
        header + "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 268435456 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        + "".join(f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on hostA device {r:2d} [0x{r:02x}] NVIDIA H100 80GB HBM3\n"
                  for r in range(ranks))
        + "".join(ROW.format(**row) for row in rows))
    return path


@pytest.mark.parametrize("row, words", [
    # all_gather_perf of an older nccl-tests (no test-name line): no reduction, per-rank count
    ({"size": 1048576, "count": 32768, "redop": "none", "root": -1}, ("redop 'none'", "sum, prod")),
    # reduce_perf: a reduction to root 0
    ({"size": 1048576, "count": 262144, "redop": "sum", "root": 0}, ("root '0'",)),
    # reduce_scatter_perf: a reduction, but the count is per rank (size / 4 B / 8 ranks)
    ({"size": 1048576, "count": 32768, "redop": "sum", "root": -1}, ("size 1048576 B", "count 32768")),
], ids=["redop-none", "root", "per-rank-count"])
def test_refuses_data_lines_of_other_tests(tmp_path, capsys, row, words):
    line = _refused(tmp_path, capsys, _log(tmp_path, [row]), *words)
    assert "hand.log:10:" in line and "not all_reduce_perf output" in line


def test_accepts_any_all_reduce_perf_test_name_and_reduction(tmp_path):
    rows = [{"size": s, "count": s // 4, "redop": "max", "root": -1} for s in (1024, 1 << 20)]
    log = parse_log(_log(tmp_path, rows, header="# Collective test starting: ./build/all_reduce_perf_mpi\n"))
    assert [r.size_bytes for r in log.rows] == [1024, 1 << 20]


def test_refuses_a_single_rank_log(tmp_path, capsys):
    """Before: a traceback (busbw 2(g-1)/g = 0 at g = 1), or with one row a 1-GPU-per-node profile."""
    _refused(tmp_path, capsys, LOGS / "refuse_single_rank.log", "ranks: 1", "2 or more ranks")
    rows = [{"size": 1 << 20, "count": 1 << 18, "redop": "sum", "root": -1}]
    _refused(tmp_path, capsys, _log(tmp_path, rows, ranks=1), "ranks: 1")


def test_refuses_logs_of_only_tiny_messages(tmp_path, capsys):
    """8/16/32-byte rows are the latency floor: before, busbw 0.005 GB/s and a 0.2 tok/s simulate."""
    _refused(tmp_path, capsys, LOGS / "refuse_tiny_messages.log", "size", "largest message 32 B",
             "MIN_BANDWIDTH_BYTES = 1048576 B")


def test_tiny_rows_are_fine_beside_a_log_of_the_same_shape_that_reaches_the_threshold(tmp_path):
    """The threshold is per group shape over all logs: small-size sweeps may come separately."""
    big = _log(tmp_path, [{"size": s, "count": s // 4, "redop": "sum", "root": -1}
                          for s in (MIN_BANDWIDTH_BYTES, 4 * MIN_BANDWIDTH_BYTES)])  # 4 MiB in ROW's 20 us: 367 GB/s busbw, plausible
    profile = import_logs([str(LOGS / "refuse_tiny_messages.log"), str(big)], str(tmp_path / "o"), "o",
                          "h100-sxm-nvswitch")
    assert profile.collectives.intra_node.bus_bandwidth_gb_per_s.value > 1.0


def test_a_two_node_log_alone_fits_a_network_tier_of_the_right_size(tmp_path):
    """Only 16x2 rows (AWS p5, EFA 3200 Gb/s: 8 x 400 Gb/s = 50 GB/s per GPU): the NCCL network
    model is refitted to them (sizes from 8 B: the fabric's latencies; up to 16 GiB: its
    bandwidths). The tree's per-NIC bandwidth stays within the NIC's 50 GB/s, a 16 KiB AllReduce
    lands near the measured 94 us (the old hierarchical fit gave 0 us and ~19,000 GB/s per NIC)."""
    import_logs([str(TWO_NODE)], str(tmp_path / "efa"), "efa", "h100-sxm-nvswitch")
    profile = load_profile(tmp_path / "efa")
    assert 5.0 <= profile.network.allreduce.bus_bandwidth_gb_per_s.value <= 50.0
    assert "fit: calibration run" in profile.network.allreduce.step_latency_us.source
    small_us = float(allreduce_time_s(profile, 16, np.array([16384.0]), nodes=2, measured=False)[0]) * 1e6
    assert 60.0 < small_us < 120.0
    (check,) = check_allreduce(profile)
    assert check.model_median < 0.15


def test_a_single_node_curve_gets_a_protocol_fit_that_follows_it(tmp_path):
    """One ring line cannot follow NCCL's protocol switches (the import's model column missed its
    8x1 rows by 10.4% median, 40.9% worst); the per-GPU-count minimum of protocol lines, as the
    shipped profiles carry, does."""
    import_logs([str(ONE_NODE)], str(tmp_path / "p5"), "p5", "h100-sxm-nvswitch")
    profile = load_profile(tmp_path / "p5")
    fit = profile.intra_node_fit(8)
    assert fit is not None and len(fit.terms) >= 2 and "min of protocol lines" in fit.source
    (check,) = check_allreduce(profile)
    assert check.model_median < 0.05 and check.model_worst < 0.2
