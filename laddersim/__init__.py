"""laddersim: a discrete-event simulator of tensor-parallel LLM inference (standard vs Ladder
Residual schedules). The Python API (``laddersim.api``) holds every task the command line runs,
one function each, with typed parameters, returning pandas DataFrames or objects; it is loaded on
first use so that ``import laddersim`` stays cheap:

* ``simulate(model, hardware, tp, batch, prompt_len, gen_len, schedules, ...)``: one row per schedule
* ``timeline(...)``: the spans of every op, rank and step
* ``sweep(grid, out)``: the results table of a what-if grid
* ``validate(measured)``, ``fit(measured, hardware)``: predictions against measured runs
* ``plan(model, ...)``: the cheapest deployments meeting a target; ``break_even(model, tp, a, b)``
* ``serving(model, hardware, tp, rate=...)``: one replica under load
* ``kernels(model, hardware, tp)``: what one layer is charged, kernel by kernel
* ``load_profile(name)``, ``profiles()``, ``show_profile``, ``check_profile``, ``fit_profile``,
  ``profiles_report``: hardware profiles
* ``calibrate_run``, ``calibrate_fit``, ``import_nccl_tests``, ``nccl_log``, ``nccl_tuning``,
  ``calibrate_kernels``: profiles and framework files from measurements
* ``plot(results, kind)``, ``plot_timeline(...)``, ``report()``: figures and the main report

``help(laddersim.simulate)`` and ``inspect.signature`` show each function's parameters.
"""

from __future__ import annotations

# laddersim.api.PUBLIC, restated: importing laddersim.api here would load it (a test checks the two).
API = ("simulate", "timeline", "sweep", "validate", "fit", "plan", "break_even", "serving", "kernels", "load_profile",
       "profiles", "show_profile", "check_profile", "fit_profile", "profiles_report", "calibrate_run",
       "calibrate_fit", "import_nccl_tests", "nccl_log", "nccl_tuning", "calibrate_kernels", "plot",
       "plot_timeline", "report")
__all__ = [*API, "__version__"]


def __getattr__(name: str):
    if name in API:
        from laddersim import api

        return getattr(api, name)
    if name == "__version__":
        from laddersim.support.provenance import laddersim_version

        return laddersim_version()
    raise AttributeError(f"module 'laddersim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
