"""Fit the SHM transport constants of ``collectives.transport.shm`` to the public nccl-tests tables
with GPU P2P unavailable or disabled (hardware_profiles/tables/nccltests_shm_p2p_off_public.csv, the
RTX 4090 docker tables and the 4x RTX 5090 table nccltests_shm_rtx5090_4gpu.csv): prints
``laddersim.fitting.public_tables.fit_shm_transport``, which says how; writes nothing.

    PYTHONPATH=$PWD python tools/fits/fit_shm_transport.py
"""

from __future__ import annotations

from laddersim.fitting.public_tables import fit_shm_transport, read_shm_tables

if __name__ == "__main__":
    for name, value in fit_shm_transport(read_shm_tables()).items():
        print(f"{name}: {value:.3f}")
