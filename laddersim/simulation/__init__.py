"""The simulation spine: a scenario (model, hardware, workload, TP, schedule) becomes per-rank
engine runs of its compiled program, and their spans become metrics (docs/architecture.md).

* ``scenario``: what is simulated (``Scenario``, ``make_scenario``) and how (``SimOptions``);
* ``compiled_program``: a schedule's program compiled once for the engine (``CompiledProgram``);
* ``engine_inputs``: the engine's runs built from a compiled program and per-kind op seconds;
* ``simulate``: one scenario (its checks, its passes, a pipeline's stages); ``many``: many
  scenarios at once, bit for bit as one by one (``symmetric_batch``: the sweep's fast path);
* ``passes``: one TP group's prefill and decode steps (rank symmetry, step interpolation);
* ``pipeline``, ``pipeline_timing``: a TP x PP scenario's stages composed into its steps;
* ``step_sampling``: the decode of a jittered run from a sample of steps;
* ``results``: ``SimResult``, metrics of a run and the summary row; ``kernel_view``: one layer's kernels.
"""
