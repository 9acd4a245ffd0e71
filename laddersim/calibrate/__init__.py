"""Calibration: measure a cluster, store the points resumably, fit a hardware profile.

* ``schema``: the columns of each benchmark's measurement CSV (which are the point's key).
* ``store``: the crash-safe, resumable CSV of measured points.
* ``grid``: which points a run measures (sizes, GEMM shapes of model programs, kernels).
* ``options``: the ``calibrate run`` flags, shared by the CLI and ``calibration/*.py``.
* ``environment``: the ``run.json`` manifest (host, devices, library versions, command line).
* ``runner``: checks the request and launches ``calibration/calibrate_all.py``.
* ``curve_fits``: alpha-beta, GEMM roofline and bandwidth fits (numpy only).
* ``fit_profile``: a run directory to a ``HardwareProfile`` with provenance.
* ``nccl_tests``: nccl-tests ``all_reduce_perf`` logs to a run directory.

Nothing here imports torch at import time; the measuring code lives in ``calibration/``.
"""
