"""Measuring a cluster: a ``calibrate run`` request checked and launched, its points stored
resumably, and other tools' logs read. The measuring programs themselves are the top-level
``calibration/`` folder (torch, launchable with torchrun); fitting their tables is
``laddersim.fitting``.

* ``options``: the ``calibrate run`` flags, shared by the CLI and ``calibration/*.py``;
* ``schema``: the columns of each benchmark's measurement CSV (which are the point's key);
* ``store``: the crash-safe, resumable CSV of measured points;
* ``grid``: which points a run measures (sizes, GEMM shapes of model programs, kernels);
* ``environment``: the ``run.json`` manifest (host, devices, library versions, command line);
* ``runner``: checks the request and launches ``calibration/calibrate_all.py``; ``cores``: CPU ranks' cores;
* ``plausibility``: measured points no hardware produces; ``nccl_log``: NCCL's debug log;
* ``faults``: how the ranks of a run ended, in one line each; ``load``: whether other work loaded
  the machine while it measured; ``closed_stderr``: a log reader gone never ends a run;
  ``atomic``: files replaced whole.

Nothing here imports torch at import time.
"""
