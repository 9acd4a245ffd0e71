"""Shared fixtures: a tiny model and profile variants, so tests run in milliseconds."""

from __future__ import annotations

import signal

import pytest

from laddersim.hardware import load_profile
from laddersim.hardware.overrides import with_overrides
from laddersim.model.shape import ModelShape

# A pytest-xdist worker starts with SIGINT ignored, and a child inherits an ignored signal, so the
# Ctrl-C tests' commands would never see theirs: the tests' processes take SIGINT as a terminal does.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def h100():
    return load_profile("h100-sxm-nvswitch")


@pytest.fixture(scope="session")
def h100_no_interference(h100):
    return with_overrides(h100, compute_slowdown=0.0, comm_slowdown=0.0)


@pytest.fixture(scope="session")
def tiny_model():
    return ModelShape(name="tiny", n_layers=4, dim=1024, n_heads=16, n_kv_heads=4,
                      intermediate_size=4096, vocab_size=32000)
