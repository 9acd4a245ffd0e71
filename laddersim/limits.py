"""Ranges every scenario number must fall in, wherever it comes from (a flag, a grid, a table).

They are far beyond any machine or model in sight; their job is to refuse, with one line, values
such as 2**64 or 1e400 that would otherwise overflow a table column or never finish.
"""

MAX_TP = 65536  # ranks in one tensor-parallel group
MAX_BATCH = 1 << 20  # sequences in one batch
MAX_TOKENS = 1 << 26  # prompt or generated tokens per sequence (~67 M)
# What-if overrides (sweep): bandwidth in GB/s, latency in us, scales, counts, fractions.
MAX_OVERRIDE = {"scale": 1e6, "gbps": 1e7, "us": 1e9, "nics_per_node": 1024, "slowdown": 100.0}


def override_maximum(column: str) -> float:
    """The largest value the override ``column`` (e.g. ``intra_latency_us``) accepts."""
    for suffix, maximum in MAX_OVERRIDE.items():
        if column.endswith(suffix):
            return maximum
    return MAX_OVERRIDE["scale"]
