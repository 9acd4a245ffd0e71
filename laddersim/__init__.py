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

``simulate``, ``sweep``, ``plan``, ``serving`` and ``report`` are also the names of submodules; on
the package these names are the API functions. Import the submodules with ``from``
(``from laddersim.simulate import make_scenario``, ``from laddersim.sweep import runner``), not
through the package attribute (``laddersim.sweep`` being the function, ``laddersim.sweep.runner``
is not the submodule).
"""

from __future__ import annotations

import sys
import types

# laddersim.api.PUBLIC, restated: importing laddersim.api here would load it (a test checks the two).
API = ("simulate", "timeline", "sweep", "validate", "fit", "plan", "break_even", "serving", "kernels", "load_profile",
       "profiles", "show_profile", "check_profile", "fit_profile", "profiles_report", "calibrate_run",
       "calibrate_fit", "import_nccl_tests", "nccl_log", "nccl_tuning", "calibrate_kernels", "plot",
       "plot_timeline", "report")
__all__ = [*API, "__version__"]


def _api_function(name: str) -> property:
    def get(package):
        from laddersim import api

        return getattr(api, name)

    def ignore_set(package, module) -> None:
        # The import system sets laddersim.<name> to the submodule after importing it; the
        # submodule stays reachable in sys.modules and through its dotted import.
        pass

    return property(get, ignore_set, doc=f"laddersim.api.{name}")


class _Package(types.ModuleType):
    # API names that are also submodules: the import system binds a submodule on its package when
    # it is imported; these properties keep the package attribute the function.
    simulate = _api_function("simulate")
    sweep = _api_function("sweep")
    plan = _api_function("plan")
    serving = _api_function("serving")
    report = _api_function("report")


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name in API:
        from laddersim import api

        return getattr(api, name)
    if name == "__version__":
        from laddersim.provenance import laddersim_version

        return laddersim_version()
    raise AttributeError(f"module 'laddersim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
