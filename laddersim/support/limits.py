"""Ranges every scenario number must fall in, wherever it comes from (a flag, a grid, a table).

They are far beyond any machine or model in sight; their job is to refuse, with one line, values
such as 2**64 or 1e400 that would otherwise overflow a table column or never finish.
"""

MAX_TP = 65536  # ranks in one tensor-parallel group
MAX_BATCH = 1 << 20  # sequences in one batch
MAX_TOKENS = 1 << 26  # prompt or generated tokens per sequence (~67 M)
# Per-op noise sigma of a jittered simulation: a lognormal multiplier of exp(2) at one sigma, where
# one op in six already runs 7x its time.
MAX_JITTER = 2.0
MAX_SAMPLE_STEPS = 2**31 - 1  # decode steps a jittered simulation samples
# What-if overrides (sweep): bandwidth in GB/s, latency in us, scales, counts, fractions.
MAX_OVERRIDE = {"scale": 1e6, "gbps": 1e7, "us": 1e9, "nics_per_node": 1024, "gpus_per_node": 1024, "slowdown": 100.0}


def override_maximum(column: str) -> float:
    """The largest value the override ``column`` (e.g. ``intra_latency_us``) accepts."""
    for suffix, maximum in MAX_OVERRIDE.items():
        if column.endswith(suffix):
            return maximum
    return MAX_OVERRIDE["scale"]


# The what-if overrides of a profile (simulate, timeline, sweep grids), in the order of a sweep's
# result columns; each "set" column sits after its "scale" column.
OVERRIDE_COLUMNS = (
    "intra_bandwidth_scale", "intra_bandwidth_gbps", "intra_latency_scale", "intra_latency_us",
    "inter_bandwidth_scale", "inter_bandwidth_gbps", "inter_latency_scale", "inter_latency_us",
    "nics_per_node", "compute_slowdown", "comm_slowdown", "gpus_per_node",
)
# (scale column, set column): two ways to say the same thing, so one of each pair at most.
EXCLUSIVE_PAIRS = (
    ("intra_bandwidth_scale", "intra_bandwidth_gbps"), ("intra_latency_scale", "intra_latency_us"),
    ("inter_bandwidth_scale", "inter_bandwidth_gbps"), ("inter_latency_scale", "inter_latency_us"),
)


def override_problem(column: str, value: float) -> str | None:
    """What is wrong with ``value`` for the override ``column`` ("must be > 0 and <= 1e+07, got
    0"), or None when it is allowed: a bandwidth or a per-node count is > 0, the rest >= 0; GPUs
    per node are whole."""
    strictly_positive = "bandwidth" in column or column.endswith("_per_node")
    maximum = override_maximum(column)
    if not (value > 0 if strictly_positive else value >= 0) or not value <= maximum:
        return f"must be {'> 0' if strictly_positive else '>= 0'} and <= {maximum:g}, got {value}"
    if column == "gpus_per_node" and value != int(value):
        return f"must be whole numbers of GPUs, got {value}"
    return None

# Serving and planning under load (laddersim.traffic, plan --rate).
MAX_REQUESTS = 1_000_000  # requests in one simulation: a few hundred bytes each, so well under 1 GB
MAX_ITERATIONS = 5_000_000  # engine iterations a run may need at least (~25,000 a second: minutes)
MIN_RATE, MAX_RATE = 1e-6, 1e9  # request arrivals per second
MAX_SLO_S = 1e6  # a TTFT or TPOT target, seconds
MIN_GAMMA_SHAPE, MAX_GAMMA_SHAPE = 0.01, 100.0  # arrival-gap shape: squared coefficient of variation 100 .. 0.01
MAX_ARRIVAL_S = 1e9  # a trace's arrival time, seconds (~32 years)
MAX_SEED = 2**32 - 1
MAX_BLOCK_SIZE = 1 << 16  # tokens per KV-cache block

# Workload defaults every command shares (simulate, sweep, plan, plan --rate, serving), printed in each answer.
DEFAULT_PROMPT_LEN = 1024
DEFAULT_GEN_LEN = 512
