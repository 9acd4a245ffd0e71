"""Keys a profile file may still use from before its units were spelled out: ``*_gbps`` fields
hold GB/s (1e9 bytes/s), so the model names them ``*_gb_per_s``. A user's file with a former key
is read as if it had the new one, and stderr says once per key and process which name to use."""

from __future__ import annotations

import sys

# Former key -> key, wherever it appears in a profile mapping.
FORMER_KEYS = {
    "bus_bandwidth_gbps": "bus_bandwidth_gb_per_s",
    "ring_nic_bus_bandwidth_gbps": "ring_nic_bus_bandwidth_gb_per_s",
    "ll_max_bus_bandwidth_gbps": "ll_max_bus_bandwidth_gb_per_s",
    "ll128_max_bus_bandwidth_gbps": "ll128_max_bus_bandwidth_gb_per_s",
    "ll_bus_bandwidth_gbps": "ll_bus_bandwidth_gb_per_s",
    "simple_bus_bandwidth_gbps": "simple_bus_bandwidth_gb_per_s",
    "nic_bandwidth_gbps": "nic_bandwidth_gb_per_s",
    "memory_bandwidth_gbps": "memory_bandwidth_gb_per_s",
    "host_memory_bandwidth_gbps": "host_memory_bandwidth_gb_per_s",
    "l2_bandwidth_gbps": "l2_bandwidth_gb_per_s",
    "collective_sync_gbps": "collective_sync_gb_per_s",
    "socket_link_bandwidth_gbps": "socket_link_bandwidth_gb_per_s",
    "pcie_link_gbps": "pcie_link_gb_per_s",
    "socket_link_gbps": "socket_link_gb_per_s",
    "bandwidth_gbps": "bandwidth_gb_per_s",  # an NCCL tuning entry's (collectives.transport.nccl_tuning)
}

_told: set[str] = set()


def with_current_keys(value, where: str):
    """``value`` (a profile mapping, or any part of one) with every former key renamed; a key
    stated both ways keeps both, so the model's check names the clash."""
    if isinstance(value, list):
        return [with_current_keys(item, where) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        new = FORMER_KEYS.get(key) if isinstance(key, str) else None
        if new is not None and new not in value:
            if key not in _told:
                _told.add(key)
                print(f"{where}: key {key} is read as {new} (GB/s); write {new}", file=sys.stderr)
            key = new
        out[key] = with_current_keys(item, where)
    return out
