"""Every fit of a profile or framework parameter, one entry per source of data:

* a calibration run's microbenchmarks (``laddersim calibrate fit RUN_DIR``): ``profile_from_run.fit_run``;
  its parts: ``run_context`` (the run as read, and how a value cites it), ``collectives``, ``host``,
  ``modules``, ``step_allreduce`` with ``ladder_chain``, ``monotone``; its warnings: ``noisy_tables``,
  ``host.fit_warnings``. nccl-tests logs become such a run: ``nccl_tests.import_logs``;
* a user's end-to-end rows (``laddersim fit``): ``rows.fit_profiles``; what it fits and how each
  number reaches the costs: ``row_parameters``; its predictions with intervals: ``row_predictions``;
* a one-GPU kernel trace (``laddersim calibrate kernels``): ``kernel_trace.fit_kernels`` (the
  framework file's data it writes is ``laddersim.model.kernel_calibration``, priced by
  ``laddersim.costs.calibrated_kernels``);
* the public measured tables a profile lists (``laddersim profiles fit``): ``public_tables``
  (``fit_intra_node``, ``fit_gemm``, ``fit_network``), and the SHM transport's constants from the
  public P2P-off tables (``public_tables.fit_shm_transport``); a GPU's per-kernel floor from the
  decode rows of its GEMM table: ``kernel_floor``;
* the development tables (``laddersim/data/validation``), for the shipped profiles' constants no
  microbenchmark pins: ``graph_host_node``, ``load_latency``, ``p2p_off_transport``
  (``tools/fits/*.py`` print each fit).

Curve fits more than one of these uses are in ``curve_fits``.
"""
