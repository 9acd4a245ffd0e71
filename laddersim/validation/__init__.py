"""Check the simulator against measured tokens/s (the paper's figure or a user's own runs)."""

from laddersim.validation.core import BUILTIN_MEASURED, ValidationSetup, error_summary, read_measured, validate
from laddersim.validation.figure import paper_figure

__all__ = ["BUILTIN_MEASURED", "ValidationSetup", "error_summary", "paper_figure", "read_measured", "validate"]
