"""Schedules as pure data: which ops each rank runs, on which stream, after what. No simpy here."""

from laddersim.schedules.plan import SCHEDULE_NAMES, Module, module_plan, parse_schedule
from laddersim.schedules.program import Op, Program, build_program

__all__ = ["SCHEDULE_NAMES", "Module", "Op", "Program", "build_program", "module_plan", "parse_schedule"]
