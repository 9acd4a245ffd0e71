"""Every fit of a profile or framework parameter, whatever it is fitted to:

* microbenchmarks of a calibration run (``calibrate fit``): ``profile_from_run`` with
  ``run_context``, ``collectives``, ``host``, ``modules``, ``curve_fits``, ``monotone``,
  ``noisy_tables``, ``ladder_chain``, ``step_allreduce``; nccl-tests logs: ``nccl_tests``;
* end-to-end measured rows (``laddersim fit``): ``rows``, ``row_parameters``, ``row_predictions``;
* kernel traces (``calibrate kernels``): ``kernel_trace``;
* public measured tables shipped with a profile (``profiles fit``): ``public_tables``.
"""
