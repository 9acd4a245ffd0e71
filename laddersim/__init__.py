"""laddersim: a discrete-event simulator of tensor-parallel LLM inference (standard vs Ladder
Residual schedules). The Python API (``laddersim.api``), loaded on first use so that
``import laddersim`` stays cheap:

* ``simulate(model=..., hardware=..., tp=..., batch=..., prompt_len=..., gen_len=..., schedules=[...])``
  -> DataFrame, one row per schedule (the columns of ``laddersim simulate --json``)
* ``timeline(...)`` -> DataFrame of spans; ``load_profile(name)``; ``sweep(grid, out)``;
  ``validate(measured=None)``

``simulate`` and ``sweep`` are also the names of submodules (``laddersim/simulate.py``,
``laddersim/sweep/``). ``laddersim.simulate`` and ``laddersim.sweep`` are those modules, made
callable: calling one runs the API function, and ``from laddersim.simulate import ...`` or
``laddersim.sweep.runner`` keep working.
"""

from __future__ import annotations

import importlib
import sys
import types

API = ("simulate", "timeline", "load_profile", "sweep", "validate")
_CALLABLE_SUBMODULES = ("simulate", "sweep")
__all__ = [*API, "__version__"]


class _CallableModule(types.ModuleType):
    """A submodule that, called, runs the API function of the same name."""

    def __call__(self, *args, **kwargs):
        api = importlib.import_module("laddersim.api")
        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


def _callable_submodule(name: str) -> property:
    def get(package):
        module = importlib.import_module(f"laddersim.{name}")
        if not isinstance(module, _CallableModule):
            module.__class__ = _CallableModule
        return module

    def ignore_set(package, module) -> None:
        # The import system binds each imported submodule on its package; the getter above
        # already returns that very module.
        pass

    return property(get, ignore_set, doc=f"the laddersim.{name} module; call it for laddersim.api.{name}")


class _Package(types.ModuleType):
    simulate = _callable_submodule("simulate")
    sweep = _callable_submodule("sweep")


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
