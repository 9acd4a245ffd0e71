"""What ``help()`` shows: every public API function that describes its framework names every
shipped framework in its docstring (``laddersim.api.common.with_choices`` fills the list in)."""

from __future__ import annotations

import inspect

import pytest

import laddersim
from laddersim.support.choices import FRAMEWORKS

PUBLIC = [name for name in laddersim.__all__ if inspect.isfunction(getattr(laddersim, name))]


def test_simulate_names_every_shipped_framework():
    doc = inspect.getdoc(laddersim.simulate)
    assert "gpt-fast-graph" in doc and all(name in doc for name in FRAMEWORKS)


@pytest.mark.parametrize("name", PUBLIC)
def test_a_function_describing_its_framework_names_every_one(name):
    function = getattr(laddersim, name)
    parameters = inspect.signature(function).parameters
    doc = inspect.getdoc(function) or ""
    assert "{FRAMEWORKS}" not in doc and "{DTYPES}" not in doc  # every placeholder filled in
    if "framework" in parameters and "``framework``" in doc:
        assert all(framework in doc for framework in FRAMEWORKS), name
