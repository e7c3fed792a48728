"""The page's colours, light and dark: every pair the sheet draws text in reads at WCAG AA
(4.5:1 for body text), computed from the sheet's own custom properties."""

from __future__ import annotations

import re
from importlib import resources

import pytest

CSS = resources.files("compactor.ui").joinpath("static", "ui.css").read_text()
# (text colour, background) for every place the sheet puts text on a colour of its own.
TEXT_ON = [
    ("fg", "bg"),  # body text
    ("fg", "panel"),  # header, buttons, the content box, notices
    ("muted", "bg"),  # captions, legends, tiers, dates
    ("muted", "panel"),  # the source in the header
    ("accent", "bg"),  # links
    ("accent", "panel"),  # the header's links
    ("danger", "bg"),  # the forget button's label
    ("danger", "panel"),
    ("pinned", "bg"),  # the "pinned" badge
    ("fg", "mark"),  # a matched word
]
AA = 4.5


def palette(scheme: str) -> dict[str, str]:
    blocks = re.findall(r":root\s*\{([^}]*)\}", CSS)
    light = dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", blocks[0]))
    if scheme == "light":
        return light
    return {**light, **dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", blocks[1]))}


def luminance(hex_colour: str) -> float:
    def channel(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_sheet_has_a_light_and_a_dark_palette():
    assert len(re.findall(r":root\s*\{", CSS)) == 2 and "prefers-color-scheme: dark" in CSS
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_reads_at_aa_contrast(scheme: str):
    colours = palette(scheme)
    low = {
        f"{fg} on {bg}": round(contrast(colours[fg], colours[bg]), 2)
        for fg, bg in TEXT_ON
        if contrast(colours[fg], colours[bg]) < AA
    }
    assert low == {}, f"{scheme}: below {AA}:1"
