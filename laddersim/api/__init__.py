"""The Python API: every task of the command line as a function with typed parameters, returning
pandas DataFrames or objects.

    import laddersim
    laddersim.simulate(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, batch=1,
                       prompt_len=128, gen_len=8, schedules=["standard", "ladder"])

The command line (``laddersim/cli``) parses its flags into these parameters, calls these
functions and prints what they return; nothing here knows the command line. Each function's
signature holds its defaults (the flags read them) and its docstring says every parameter's units
and allowed values (``help(laddersim.plan)``). One module per task (``common``: what they share):

* ``scenario``: ``simulate``, ``timeline``, ``load_profile``
* ``kernel_costs``: ``kernels``
* ``sweeps``: ``sweep``
* ``validation_task``, ``fit_task``: ``validate``, ``fit``
* ``planning``, ``rate_planning``, ``plan_inputs``: ``plan``, ``break_even``
* ``serving_task``: ``serving``
* ``profiles_task``: ``profiles``, ``show_profile``, ``check_profile``, ``fit_profile``,
  ``profiles_report``
* ``calibration_task``: ``calibrate_run``, ``calibrate_fit``, ``import_nccl_tests``, ``nccl_log``,
  ``nccl_tuning``, ``calibrate_kernels``
* ``plotting``, ``reporting``: ``plot``, ``plot_timeline``, ``report``
* ``params``, ``serving_params``, ``plan_params``: the parameter objects (``ScenarioParams``,
  ``RunOptions``, ``ServingParams``, ``PlanParams``, ``BreakEvenParams``): every range checked
  there, once, for the functions and the command line alike

``import laddersim`` stays cheap: the package exposes these names lazily (``laddersim/__init__``),
so does this one (each name's module is imported when the name is first used), and each module
imports the simulator only when a function runs. Bad input raises
``laddersim.errors.UserInputError`` with the one line the command prints; notes a task has for
its user (a profile resting on datasheets only, a skipped candidate) go to stderr.
"""

import importlib

# Each name's module: a command imports only its own task (``simulate`` loads neither the
# calibration's nor the planner's modules), on first use of the name (PEP 562).
_MODULE_OF = {
    **dict.fromkeys(("calibrate_fit", "calibrate_kernels", "calibrate_run", "import_nccl_tests", "nccl_log",
                     "nccl_tuning"), "calibration_task"),
    "fit": "fit_task",
    "kernels": "kernel_costs",
    **dict.fromkeys(("PlanAnswer", "break_even", "plan", "plan_run"), "planning"),
    **dict.fromkeys(("plot", "plot_timeline"), "plotting"),
    **dict.fromkeys(("ProfileCheck", "check_profile", "fit_profile", "profiles", "profiles_report", "show_profile"),
                    "profiles_task"),
    "RatePlanAnswer": "rate_planning",
    "report": "reporting",
    **dict.fromkeys(("allreduce_used", "load_profile", "simulate", "simulate_schedules", "time_sources", "timeline"),
                    "scenario"),
    **dict.fromkeys(("ServingAnswer", "serving", "serving_run"), "serving_task"),
    "sweep": "sweeps",
    "validate": "validation_task",
    **dict.fromkeys(("RunOptions", "ScenarioParams"), "params"),
    "ServingParams": "serving_params",
    **dict.fromkeys(("BreakEvenParams", "PlanParams"), "plan_params"),
}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'laddersim.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"laddersim.api.{module}"), name)
    globals()[name] = value  # found at once next time
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])


# The public functions, in the order the docs list them (laddersim.__all__).
PUBLIC = ("simulate", "timeline", "sweep", "validate", "fit", "plan", "break_even", "serving", "kernels",
          "load_profile", "profiles", "show_profile", "check_profile", "fit_profile", "profiles_report", "calibrate_run",
          "calibrate_fit", "import_nccl_tests", "nccl_log", "nccl_tuning", "calibrate_kernels", "plot",
          "plot_timeline", "report")
# What the command line calls beside them: a task's whole answer (rows and what it prints), each
# taking the task's parameter objects (the public function builds them from its keywords).
ANSWERS = ("simulate_schedules", "time_sources", "allreduce_used", "plan_run", "PlanAnswer", "RatePlanAnswer", "serving_run",
           "ServingAnswer", "ProfileCheck")
# The parameter objects: a task's parameters as one typed, checked value.
PARAMS = ("ScenarioParams", "RunOptions", "ServingParams", "PlanParams", "BreakEvenParams")

__all__ = [*PUBLIC, *ANSWERS, *PARAMS]
