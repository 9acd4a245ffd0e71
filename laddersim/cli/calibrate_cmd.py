"""``laddersim calibrate``: measure this cluster (run), turn a run into a profile (fit), or
import nccl-tests ``all_reduce_perf`` logs as a run (import-nccl-tests)."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from laddersim.cli.args import RESUMABLE_NOTE, positive_int
from laddersim.errors import UserInputError

DEFAULT_BASE = "h100-sxm-nvswitch"


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="measure a cluster and fit a hardware profile")
    cmds = p.add_subparsers(dest="calibrate_command", required=True, parser_class=type(p))

    from laddersim.calibrate.options import add_run_args

    run = cmds.add_parser("run", help="run the microbenchmarks (resumable); spawns local ranks or runs under torchrun")
    add_run_args(run)
    run.set_defaults(func=_run, interrupted_note=RESUMABLE_NOTE)

    fit = cmds.add_parser("fit", help="fit a hardware profile (RUN_DIR/profile.yaml) from a run")
    fit.add_argument("run_dir", metavar="RUN_DIR")
    fit.add_argument("--name", required=True, help="profile name")
    fit.add_argument("--base", default=None,
                     help=f"profile to copy unmeasured parameters from (default {DEFAULT_BASE})")
    fit.set_defaults(func=_fit)

    imp = cmds.add_parser("import-nccl-tests", help="nccl-tests all_reduce_perf logs to a run directory and profile")
    imp.add_argument("logs", metavar="LOG", nargs="+")
    imp.add_argument("--out", required=True, help="run directory to write")
    imp.add_argument("--name", default=None, help="profile name (default: the --out directory name)")
    imp.add_argument("--base", default=None, help=f"profile for unmeasured parameters (default {DEFAULT_BASE})")
    imp.add_argument("--iters", type=positive_int("iters"), default=None,
                     help="iterations per point when the log header does not say")
    imp.set_defaults(func=_import)


def _run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("torch") is None:
        raise UserInputError("calibrate run: needs torch, which is not installed; "
                             "pip install torch (e.g. pip install -e '.[calibrate]')")
    from laddersim.calibrate.environment import command_line
    from laddersim.calibrate.options import options_from_args
    from laddersim.calibrate.runner import launch

    return launch(options_from_args(args), command_line())


def _fit(args: argparse.Namespace) -> int:
    from laddersim.calibrate.fit_profile import fit_run

    profile = fit_run(args.run_dir, args.name, args.base or DEFAULT_BASE)
    _report(profile, args.run_dir)
    return 0


def _import(args: argparse.Namespace) -> int:
    from laddersim.calibrate.nccl_tests import import_logs

    profile = import_logs(args.logs, args.out, args.name, args.base or DEFAULT_BASE, args.iters)
    _report(profile, args.out)
    return 0


def _report(profile, run_dir: str) -> None:
    gpu, intra = profile.gpu, profile.collectives.intra_node
    print(f"profile {profile.name}: {run_dir}/profile.yaml")
    print(f"  device            {gpu.name}, {profile.node.gpus_per_node} per node")
    print(f"  intra-node AR     {intra.base_latency_us.value:.2f} us + {intra.step_latency_us.value:.3f} us/step, "
          f"busbw {intra.bus_bandwidth_gbps.value:.3f} GB/s ({intra.algorithm})")
    for table in profile.collectives.tables:
        print(f"  AR table          {table.file} ({table.mode}, timing {table.timing}, {table.library}); "
              f"simulated as {profile.collectives.mode}")
    print(f"  GEMM              peak {gpu.peak_tflops.value:.4g} TFLOP/s x {gpu.gemm_compute_efficiency.value:.3f}, "
          f"{gpu.memory_bandwidth_gbps.value:.4g} GB/s x {gpu.gemm_memory_efficiency.value:.3f}, "
          f"p={gpu.gemm_blend_order.value:g}, tile {gpu.gemm_tile_m.value:g}, floor {gpu.kernel_launch_us.value:.2f} us")
    print(f"  elementwise       {gpu.elementwise_memory_efficiency.value:.3f} of memory bandwidth")
    print(f"  interference      compute +{profile.interference.compute_slowdown.value:.3f}, "
          f"comm +{profile.interference.comm_slowdown.value:.3f}")
    sys.stdout.flush()
