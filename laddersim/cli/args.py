"""Argument types and flags shared by several subcommands.

The flags' types check syntax only: ``integer`` and ``real`` turn a word into a number where it is
one and pass anything else on as text, so the API's parameter objects (``laddersim.api.params``)
refuse a bad value, a word or a number out of range, with the same one line a Python caller gets.
An option's default is read from the object's field (or the API function's parameter) it fills."""

from __future__ import annotations

import argparse
import inspect

from laddersim.api.params import RunOptions, ScenarioParams
from laddersim.support.choices import ALLREDUCES, DTYPES, FRAMEWORKS, KV_CACHE_DTYPES, KV_CACHES, KV_READS, QUANTS
from laddersim.support.limits import MAX_JITTER, OVERRIDE_COLUMNS

def integer(text: str):
    """An int where ``text`` is one, else ``text`` itself (the parameter object names what is allowed)."""
    try:
        return int(text)
    except ValueError:
        return text


def real(text: str):
    """A float where ``text`` is one (``inf`` and ``nan`` included: refused by range), else ``text``."""
    try:
        return float(text)
    except ValueError:
        return text


def choices_metavar(names) -> str:
    """``{a,b,c}``: how argparse shows a closed set, for an option whose values the parameter
    object checks (so the help reads as it would with ``choices=``)."""
    return "{" + ",".join(names) + "}"


def default_of(source, name: str):
    """The default of ``name``: a field of a parameter object class (``ScenarioParams``) or a
    parameter of an API function. An option's default is read here, never restated."""
    fields = getattr(source, "model_fields", None)
    if fields is not None:
        return fields[name].default
    return inspect.signature(source).parameters[name].default


def call_api(function, args: argparse.Namespace, **given):
    """``function(...)`` with every parameter that has a parsed flag of the same name (``--prompt-len``
    is ``prompt_len``) taken from ``args``, and ``given`` for the others (renamed or computed). A
    flag added to the parser and the parameter added to the API function meet here by name: no
    command's handler lists them."""
    parameters = inspect.signature(function).parameters
    taken = {name: getattr(args, name) for name in parameters if name not in given and hasattr(args, name)}
    return function(**taken, **given)


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """--model and --hardware."""
    parser.add_argument("--model", required=True, help="preset (llama-3.1-8b/70b/405b) or path to a HF config.json")
    parser.add_argument("--hardware", required=True, help="profile name (laddersim profiles list) or path")


def add_parallel_args(parser: argparse.ArgumentParser, function=None, *, required: bool = True) -> None:
    """How the model is split over GPUs (--tp, and --pp and --pp-microbatches where ``function``,
    the API function the command calls, takes ``pp`` and ``pp_microbatches``): every command that
    takes one scenario's parallelism adds it here, with ScenarioParams' defaults, so a new degree
    is one flag in this function and one field of ScenarioParams."""
    parser.add_argument("--tp", type=integer, required=required, help="tensor-parallel degree")
    takes = inspect.signature(function).parameters if function is not None else {}
    pp, microbatches = default_of(ScenarioParams, "pp"), default_of(ScenarioParams, "pp_microbatches")
    if "pp" in takes:
        parser.add_argument("--pp", type=integer, default=pp,
                            help=f"pipeline stages, each a TP group of --tp GPUs with a contiguous share of the "
                                 f"layers (default {pp}: none)")
    if "ep" in takes:
        parser.add_argument("--ep", type=integer, default=default_of(ScenarioParams, "ep"),
                            help="a mixture-of-experts model's expert-parallel ranks in each TP group (default 1: "
                                 "every expert split --tp ways; with --dp-attention: the experts over all ep GPUs)")
    if "dp_attention" in takes:
        parser.add_argument("--dp-attention", action="store_true",
                            help="data-parallel attention: ep/tp attention replicas of --tp GPUs, each over its "
                                 "share of the batch, experts spread over all --ep GPUs, dispatch and combine as "
                                 "all-to-alls in one node (vLLM --data-parallel-size ep/tp --tensor-parallel-size tp "
                                 "--enable-expert-parallel; SGLang --tp ep --dp ep/tp --enable-dp-attention)")
    if "pp_microbatches" in takes:
        parser.add_argument("--pp-microbatches", type=integer, default=microbatches,
                            help="batches of batch/M in flight through the stages, one per stage as serving engines "
                                 f"run a pipeline (default {microbatches}: one batch, the stages in turn, as the "
                                 "Ladder Residual benchmark)")


def add_workload_args(parser: argparse.ArgumentParser, *, gen_help: str = "generated tokens per sequence",
                      batch: bool = True) -> None:
    """--batch --prompt-len --gen-len, with ScenarioParams' defaults (shown in the help)."""
    if batch:
        parser.add_argument("--batch", type=integer, default=default_of(ScenarioParams, "batch"),
                            help=f"sequences in the batch (default {default_of(ScenarioParams, 'batch')})")
    parser.add_argument("--prompt-len", type=integer, default=default_of(ScenarioParams, "prompt_len"),
                        help=f"prompt tokens per sequence (default {default_of(ScenarioParams, 'prompt_len')})")
    parser.add_argument("--gen-len", type=integer, default=default_of(ScenarioParams, "gen_len"),
                        help=f"{gen_help} (default {default_of(ScenarioParams, 'gen_len')})")


def add_dtype_arg(parser: argparse.ArgumentParser, default: str) -> None:
    """--dtype, and --quant and --kv-cache-dtype (ScenarioParams' defaults)."""
    parser.add_argument("--dtype", metavar=choices_metavar(DTYPES), default=default,
                        help=f"element type (default {default})")
    add_quant_args(parser)


def add_quant_args(parser: argparse.ArgumentParser) -> None:
    """--quant and --kv-cache-dtype, with ScenarioParams' defaults."""
    parser.add_argument("--quant", metavar=choices_metavar(QUANTS), default=default_of(ScenarioParams, "quant"),
                        help="linear layers' quantization: fp8 = FP8 weights and per-tensor FP8 activations, fp8-block = "
                             "128x128 block-scaled FP8, nvfp4 = FP4 weights and activations with an FP8 scale per 16 (Blackwell), "
                             "int8-weight / int4-weight = weight-only (default none)")
    parser.add_argument("--kv-cache-dtype", metavar=choices_metavar(KV_CACHE_DTYPES),
                        default=default_of(ScenarioParams, "kv_cache_dtype"),
                        help="KV cache element type: auto = the dtype's, fp8 = one byte (default auto)")


def add_scenario_args(parser: argparse.ArgumentParser, function) -> None:
    """--model --hardware --tp (--pp --pp-microbatches where ``function`` takes them) --batch
    --prompt-len --gen-len --dtype --framework --kv-cache --kv-reads, ScenarioParams' defaults."""
    add_model_args(parser)
    add_parallel_args(parser, function)
    add_workload_args(parser)
    add_dtype_arg(parser, default_of(ScenarioParams, "dtype"))
    add_framework_args(parser, default_of(ScenarioParams, "framework"))


def add_framework_args(parser: argparse.ArgumentParser, default: str) -> None:
    """--framework (default ``default``) and the two KV-cache settings it carries (flags override
    the framework's)."""
    parser.add_argument("--framework", default=default,
                        help=f"serving framework ({', '.join(FRAMEWORKS)} or a framework .yaml from laddersim calibrate "
                             f"kernels: kernel paths, KV cache, AllReduce kernel; default "
                             + (f"{default}, the paper's benchmark)" if default else "each row's framework column, else "
                                "gpt-fast, the paper's benchmark; given, it overrides the column)"))
    parser.add_argument("--kv-cache", metavar=choices_metavar(KV_CACHES), default=None,
                        help="override the framework's: static = preallocated cache read in full each step; dynamic = grows")
    parser.add_argument("--kv-reads", metavar=choices_metavar(KV_READS), default=None,
                        help="override the framework's: repeat_interleave = K/V copied to every query head; per_kv_head = GQA-aware kernel")
    parser.add_argument("--allreduce", metavar=choices_metavar(ALLREDUCES), default=None,
                        help="override the framework's AllReduce rule with one implementation (NCCL above its size "
                             "cut-offs); refused where the machine, group or dtype cannot run it")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """--jitter --exact-steps --sample-steps --seed: RunOptions' fields, with its defaults."""
    parser.add_argument("--jitter", type=real, default=default_of(RunOptions, "jitter"),
                        help="sigma of per-rank lognormal op-time noise (simulates every rank and step); "
                             f"at most {MAX_JITTER:g}, where one op in six already runs 7x its time")
    parser.add_argument("--exact-steps", action="store_true",
                        help="with --jitter: simulate every decode step instead of a random sample of them")
    parser.add_argument("--sample-steps", type=integer, default=default_of(RunOptions, "sample_steps"),
                        help="with --jitter: decode steps to simulate (default: about 120,000 op-rank runs, "
                             "4 to 64 steps); the output carries the 95%% interval of the estimate")
    seed = default_of(RunOptions, "seed")
    parser.add_argument("--seed", type=integer, default=seed,
                        help=f"with --jitter: seed of the noise, 0 to 2**32-1 (default {seed})")


# What each what-if override changes (simulate's flags, one value; sweep's, a list of them).
OVERRIDE_HELP = {
    "intra_bandwidth_scale": "x intra-node AllReduce bandwidth",
    "intra_bandwidth_gbps": "intra-node large-message AllReduce bus bandwidth of the TP group, GB/s",
    "intra_latency_scale": "x intra-node AllReduce latency",
    "intra_latency_us": "intra-node small-message AllReduce time of the TP group, us",
    "inter_bandwidth_scale": "x inter-node AllReduce bandwidth",
    "inter_bandwidth_gbps": "inter-node (network tier) bus bandwidth, GB/s",
    "inter_latency_scale": "x inter-node AllReduce latency",
    "inter_latency_us": "inter-node (network tier) latency across the nodes, us",
    "nics_per_node": "NICs per node (a NIC per GPU at most; fewer share the inter-node traffic)",
    "gpus_per_node": "GPUs per node (whole numbers; a TP group larger than a node spans nodes)",
    "compute_slowdown": "GEMM slowdown while an AllReduce runs (fraction)",
    "comm_slowdown": "AllReduce slowdown while compute runs (fraction of its whole time)",
}


def add_what_if_args(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    """The what-if overrides of the profile (--intra-bandwidth-scale ... --gpus-per-node), one value
    each (simulate), or a list of values each (``many``: sweep's grid axes)."""
    group = parser.add_argument_group("what-if changes of the profile (as a sweep grid's overrides)") if not many \
        else parser
    for key in OVERRIDE_COLUMNS:
        group.add_argument("--" + key.replace("_", "-"), type=real, help=OVERRIDE_HELP[key],
                           **({"nargs": "+"} if many else {}))


def add_measured_workload_args(parser: argparse.ArgumentParser, function) -> None:
    """How measured rows become scenarios (validate, fit): profiles for P2P off, the benchmark's
    dtype and attention; defaults are ``function``'s (the paper's gpt-fast benchmark)."""
    parser.add_argument("--hardware-p2p-off", default=default_of(function, "hardware_p2p_off"),
                        help="profile for rows with p2p=off" + ("" if default_of(function, "hardware_p2p_off") else
                             " (default: each row's hardware column, else h100-sxm-p2p-off)"))
    parser.add_argument("--dtype", default=default_of(function, "dtype"), metavar=choices_metavar(DTYPES),
                        help="the rows' dtype (default: each row's dtype column, else float16; given, it "
                             "overrides the column)")
    add_framework_args(parser, default_of(function, "framework"))


# What a resumable command (sweep, calibrate run) says when interrupted; see laddersim.cli.main.
RESUMABLE_NOTE = "finished work is kept; re-run the same command to resume"
