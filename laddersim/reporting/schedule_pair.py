"""One setting run under the standard and the Ladder schedule, for the report's comparison tables."""

from __future__ import annotations

from laddersim.errors import UserInputError
from laddersim.simulation.simulate import check_memory, make_scenario, simulate

PAIR = ("standard", "ladder")


def standard_and_ladder(**setting) -> tuple[dict, dict, object] | None:
    """(standard summary, ladder summary, the ladder scenario) of one setting (``make_scenario``
    keywords without ``schedule``), or None where it cannot run (it does not fit, or the machine or
    dtype refuses it)."""
    summaries, scenario = {}, None
    try:
        for schedule in PAIR:
            scenario = make_scenario(schedule=schedule, **setting)
            check_memory(scenario)
            summaries[schedule] = simulate(scenario).summary()
    except UserInputError:
        return None
    return summaries["standard"], summaries["ladder"], scenario
