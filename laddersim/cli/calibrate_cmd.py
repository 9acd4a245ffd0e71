"""``laddersim calibrate``: measure this cluster (run), turn a run into a profile (fit), import
nccl-tests ``all_reduce_perf`` logs as a run (import-nccl-tests), read NCCL's own choices from its
debug log (nccl-log), or a framework file from a kernel trace (kernels)."""

from __future__ import annotations

import argparse
import sys

import yaml

from laddersim.api.calibration_task import (
    add_run_args,
    calibrate_fit,
    calibrate_kernels,
    calibrate_run,
    copied_reason,
    import_nccl_tests,
    nccl_log,
    nccl_tuning,
    options_from_args,
)
from laddersim.cli.args import RESUMABLE_NOTE, call_api, default_of, integer


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="measure a cluster and fit a hardware profile")
    cmds = p.add_subparsers(dest="calibrate_command", required=True, parser_class=type(p))

    run = cmds.add_parser("run", help="run the microbenchmarks (resumable); spawns local ranks or runs under torchrun")
    add_run_args(run)
    run.set_defaults(func=_run, interrupted_note=RESUMABLE_NOTE)

    fit = cmds.add_parser("fit", help="fit a hardware profile (RUN_DIR/profile.yaml) from a run")
    fit.add_argument("run_dir", metavar="RUN_DIR")
    fit.add_argument("--name", required=True, help="profile name")
    fit.add_argument("--base", default=default_of(calibrate_fit, "base"),
                     help=f"profile to copy unmeasured parameters from (default {default_of(calibrate_fit, 'base')})")
    fit.set_defaults(func=_fit)

    imp = cmds.add_parser("import-nccl-tests", help="nccl-tests all_reduce_perf logs to a run directory and profile")
    imp.add_argument("logs", metavar="LOG", nargs="+")
    imp.add_argument("--out", required=True, help="run directory to write")
    imp.add_argument("--name", default=None, help="profile name (default: the --out directory name)")
    imp.add_argument("--base", default=default_of(import_nccl_tests, "base"),
                     help=f"profile for unmeasured parameters (default {default_of(import_nccl_tests, 'base')})")
    imp.add_argument("--iters", type=integer, default=None,
                     help="iterations per point when the log header does not say")
    imp.set_defaults(func=_import)

    log = cmds.add_parser("nccl-log", help="NCCL's own transport and algorithm choices, from its debug log "
                                           "(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING), beside laddersim's")
    log.add_argument("logs", metavar="LOG", nargs="+")
    log.add_argument("--hardware", default=None,
                     help="profile whose (algorithm, protocol) to show beside NCCL's for the same GPU count")
    log.add_argument("--max-size", type=integer, default=default_of(nccl_log, "max_size"),
                     metavar="BYTES",
                     help="largest AllReduce message listed (powers of two from 1 KiB; default 64 MiB)")
    log.add_argument("--out", default=None, metavar="FILE.csv", help="also write every table's rows as CSV")
    log.add_argument("--yaml", action="store_true",
                     help="print only the AllReduce entries as a profile's collectives.transport.nccl_tuning list")
    log.set_defaults(func=_nccl_log)

    ker = cmds.add_parser("kernels", help="a framework file from a one-GPU kernel trace (calibration/kernel_trace.py --out)")
    ker.add_argument("trace_dir", metavar="TRACE_DIR")
    ker.add_argument("--hardware", required=True, help="the traced GPU's profile (its kernel floor)")
    ker.add_argument("--out", required=True, metavar="FILE.yaml", help="framework file to write")
    ker.add_argument("--base", default=default_of(calibrate_kernels, "base"),
                     help=f"framework for what a trace does not measure (default {default_of(calibrate_kernels, 'base')})")
    ker.add_argument("--model", default=None, help="the traced model (default: the trace's PROVENANCE.md --model)")
    ker.set_defaults(func=_kernels)


def _run(args: argparse.Namespace) -> int:
    options = options_from_args(args).model_dump()
    options.pop("out")
    return calibrate_run(args.out, **options)


def _fit(args: argparse.Namespace) -> int:
    profile = calibrate_fit(args.run_dir, args.name, args.base)
    _report(profile, args.run_dir)
    return 0


def _kernels(args: argparse.Namespace) -> int:
    fw = call_api(calibrate_kernels, args)
    for regime in fw.kernel_calibration.regimes:
        counts = ", ".join(f"{c} {v.kernels:g}" for c, v in regime.classes.items() if v.kernels)
        print(f"batch {regime.batch}: {regime.linear_path} linears, {regime.layer_us:.1f} us per layer ({counts})")
    print(f"wrote {args.out}: use it as --framework {args.out}")
    return 0


def _import(args: argparse.Namespace) -> int:
    profile = call_api(import_nccl_tests, args)
    _report(profile, args.out)
    return 0


def _nccl_log(args: argparse.Namespace) -> int:
    if args.yaml:
        print(yaml.safe_dump({"nccl_tuning": nccl_tuning(args.logs)}, sort_keys=False, width=200), end="")
        return 0
    frame = call_api(nccl_log, args)
    for (index, header), part in frame.groupby(["table", "communicator"], sort=False):
        print(f"table {index}: {header}")
        print(part.drop(columns=["table", "communicator"]).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0


def _report(profile, run_dir: str) -> None:
    """The fitted profile in a few lines; a value the fit copied from the base profile (its
    benchmark was not run, or the base is the same device's datasheet) is marked
    "(from base PROFILE: why)", so it cannot pass for a measurement."""
    base = profile.provenance.get("base_profile", default_of(calibrate_fit, "base"))

    def line(label: str, *parts) -> str:
        """``parts``: (text, Sourced) pairs; one mark at the end when every value has the same."""
        notes = [f" (from base {base}: {why})" if (why := copied_reason(value, base)) else ""
                 for _, value in parts]
        if len(set(notes)) == 1:
            body = ", ".join(text for text, _ in parts) + notes[0]
        else:
            body = ", ".join(text + note for (text, _), note in zip(parts, notes))
        return f"  {label:<18}{body}"

    gpu, intra = profile.gpu, profile.collectives.intra_node
    inter = profile.network.allreduce if profile.network else None
    out = [f"profile {profile.name}: {run_dir}/profile.yaml",
           f"  {'device':<18}{gpu.name}, {profile.node.gpus_per_node} per node",
           line("intra-node AR", (f"{intra.base_latency_us.value:.2f} us + {intra.step_latency_us.value:.3f} us/step",
                                  intra.base_latency_us),
                (f"busbw {intra.bus_bandwidth_gb_per_s.value:.3f} GB/s ({intra.algorithm})", intra.bus_bandwidth_gb_per_s))]
    for table in profile.collectives.tables:
        out.append(f"  {'AR table':<18}{table.file} ({table.mode}, timing {table.timing}, {table.library}); "
                   f"simulated as {profile.collectives.mode}")
    for table in profile.collectives.allgather_tables:
        out.append(f"  {'AllGather table':<18}{table.file} ({table.mode}, timing {table.timing}, {table.library}): "
                   "the logits gather")
    if inter is not None:
        out.append(line("inter-node AR", (f"{inter.base_latency_us.value:.2f} us + {inter.step_latency_us.value:.3f} "
                                          "us/step", inter.base_latency_us),
                        (f"busbw {inter.bus_bandwidth_gb_per_s.value:.3f} GB/s", inter.bus_bandwidth_gb_per_s)))
    out += [
        line("peaks", (f"{gpu.peak_tflops.value:.4g} TFLOP/s", gpu.peak_tflops),
             (f"{gpu.memory_bandwidth_gb_per_s.value:.4g} GB/s memory", gpu.memory_bandwidth_gb_per_s)),
        line("GEMM", (f"x {gpu.gemm_compute_efficiency.value:.3f} compute, x {gpu.gemm_memory_efficiency.value:.3f} "
                      f"memory, p={gpu.gemm_blend_order.value:g}, tile {gpu.gemm_tile_m.value:g}, "
                      f"floor {gpu.kernel_launch_us.value:.2f} us", gpu.gemm_compute_efficiency)),
        line("elementwise", (f"{gpu.elementwise_memory_efficiency.value:.3f} of memory bandwidth",
                             gpu.elementwise_memory_efficiency)),
        line("interference", (f"compute +{profile.interference.compute_slowdown.value:.3f}", profile.interference.compute_slowdown),
             (f"comm +{profile.interference.comm_slowdown.value:.3f}", profile.interference.comm_slowdown),
             *([(f"compute scaled by NCCL's channel share of {channels.value:g}", channels)]
               if (channels := profile.interference.collective_channels) else [])),
    ]
    if (host := profile.host_overhead) is not None:
        per_step = sum(e.compute + e.view + e.collective for e in host.ops)
        out.append(line("host overhead", (f"{host.mode} {host.timing}: {host.compute_op_us.value:.2f} us per compute "
                                          f"op", host.compute_op_us),
                        (f"{host.view_op_us.value:.2f} per view", host.view_op_us),
                        (f"{host.collective_op_us.value:.2f} per collective issue; {len(host.ops)} kinds, "
                         f"{per_step:g} ops over one of each; collectives progress on {host.collective_progress}",
                         host.collective_op_us),
                        (f"rank skew: a collective waits {100 * host.rank_skew_fraction.value:.1f}% of the compute "
                         f"before it" if host.rank_skew_fraction.value else "rank skew not measured",
                         host.rank_skew_fraction)))
    others = {"eager launch": profile.collectives.eager_launch_us, "device memory": gpu.memory_gb,
              "attention efficiency": gpu.attention_compute_efficiency,
              "framework overheads": profile.framework.step_overhead_us}
    copied = [what for what, value in others.items() if copied_reason(value, base)]
    if copied:
        out.append(f"  {'also from base':<18}{', '.join(copied)} (from base {base}: not measured)")
    print("\n".join(out))
    sys.stdout.flush()
