"""Capacity planning (cheapest configuration meeting a target) and break-even fabrics."""

from laddersim.planning.break_even import BreakEven, SharedRun, Side, break_even, parse_side
from laddersim.planning.planner import PlanOption, Target, candidate_points, candidate_tps, rank_options
from laddersim.planning.prices import PriceFile, load_prices

__all__ = ["BreakEven", "PlanOption", "PriceFile", "SharedRun", "Side", "Target", "break_even",
           "candidate_points", "candidate_tps", "load_prices", "parse_side", "rank_options"]
