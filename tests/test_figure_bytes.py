"""Figure files are byte-identical for the same drawing: SVG ids do not depend on float noise in
the layout (a committed report's SVG once differed from its regeneration in clip-path ids alone)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from laddersim.plots import figure_io
from laddersim.plots.figure_io import new_figure, save_figure, styled

REFERENCE = re.compile(r'(?:url\(#|href="#)([^)"]+)')


def _draw(tmp_path, name: str):
    with styled():
        fig, axes = new_figure(2)
        for i, ax in enumerate(axes):
            x = np.linspace(0, 1, 20)
            ax.plot(x, x ** (i + 1), marker="o", label=f"curve {i}")
            ax.bar([0.2, 0.6], [0.3, 0.5], width=0.1, hatch="//")
            ax.legend()
    return save_figure(fig, tmp_path / name)


def test_ids_that_hash_other_content_change_no_byte(tmp_path, monkeypatch):
    """matplotlib hashes each clip rectangle's full-precision floats into its id; another salt
    stands for any such difference (a layout 1e-7 px off): every hashed id changes, yet the
    file must not."""
    png_a, svg_a = _draw(tmp_path, "a")
    monkeypatch.setitem(figure_io.STYLE, "svg.hashsalt", "another salt")
    png_b, svg_b = _draw(tmp_path, "b")
    clip_ids = re.findall(r'<clipPath id="([^"]+)"', svg_a.read_text())
    assert clip_ids[:2] == ["p-0", "p-1"]  # renumbered in document order
    assert svg_a.read_bytes() == svg_b.read_bytes()
    assert png_a.read_bytes() == png_b.read_bytes()


def test_renumbering_keeps_what_is_drawn_and_only_renames_hashed_ids():
    svg = ('<path id="m0123456789" d="M 0 0"/><use xlink:href="#m0123456789"/>'
           '<g clip-path="url(#pabcdefabcd)"/><clipPath id="pabcdefabcd"><rect x="1"/></clipPath>'
           '<path id="DejaVuSans-30" d="M 1 2"/><text>pabcdefabcd</text>')
    out = figure_io._renumber_svg_ids(svg)
    assert out == ('<path id="m-0" d="M 0 0"/><use xlink:href="#m-0"/>'
                   '<g clip-path="url(#p-0)"/><clipPath id="p-0"><rect x="1"/></clipPath>'
                   '<path id="DejaVuSans-30" d="M 1 2"/><text>pabcdefabcd</text>')


def test_every_reference_in_a_renumbered_svg_names_an_id(tmp_path):
    _, svg = _draw(tmp_path, "refs")
    text = svg.read_text()
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    references = set(REFERENCE.findall(text))
    assert references and references <= ids, sorted(references - ids)[:5]
    assert not re.search(r'id="[pmh][0-9a-f]{10}"', text)  # no hashed id left
    assert {"p-0", "m-0", "h-0"} <= ids  # clip paths, markers and hatches all renamed


@pytest.mark.parametrize("kind", ["p", "m", "h"])
def test_ids_of_each_kind_count_from_zero(tmp_path, kind):
    _, svg = _draw(tmp_path, f"kind-{kind}")
    numbers = [int(n) for n in re.findall(rf'\bid="{kind}-(\d+)"', svg.read_text())]
    assert numbers == list(range(len(numbers))) and numbers
