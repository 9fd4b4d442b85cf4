"""`phasewatch report --plot`: every panel on one time axis with round ticks, verdict marks labelled
(ranks marked alike share one label), the title clear of the first caption. The README's picture:
tests/integration/test_report_plot_render.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from phasewatch.commands.report import LABEL_CHAR, MAX_TICKS, ROUND_STEPS, WIDTH, time_axis, to_svg
from phasewatch.sinks.history import PhaseRecord, StartupRecord

REPO = Path(__file__).resolve().parents[2]
SVG_NS = {"s": "http://www.w3.org/2000/svg"}
T0 = 1_796_025_600.0
UNIT = "sglang-kimi.service"


def record(n: int, took: float, verdicts: tuple[tuple[str, str | None, str | None, float], ...] = (),
           ranks: int = 8) -> StartupRecord:
    start = T0 + n * 3600
    load = took * 0.5
    spans = {"main": [("launch", start, None)]}
    for r in range(ranks):
        spans[f"TP{r}"] = [("weight_load", start + 5, start + 5 + load), ("cuda_graph_capture", start + 5 + load, None)]
    return StartupRecord(UNIT, f"inv-{n}", "fp", start, start + took, "ready", None,
                         (PhaseRecord("weight_load", load, 0.0, None, 0.0, "TP0"),), spans, verdicts)


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def texts(root: ET.Element, cls: str) -> list[ET.Element]:
    return [t for t in root.iterfind(".//s:text", SVG_NS) if t.get("class") == cls]


@pytest.mark.parametrize(("longest", "step", "end"), [
    (15.0, 2, 16), (112.0, 15, 120), (223.0, 30, 240), (1123.0, 300, 1200), (1419.0, 300, 1500),
    (2744.0, 600, 3000), (3 * 3600.0, 1800, 3 * 3600), (0.0, 1, 1),
])
def test_the_axis_has_round_ticks_covering_the_longest_start_up(longest: float, step: int, end: float) -> None:
    length, ticks = time_axis(longest)
    assert (length, ticks[1] - ticks[0] if len(ticks) > 1 else None) == (end, step)
    assert ticks[0] == 0 and ticks[-1] == length >= longest and len(ticks) <= MAX_TICKS + 1
    assert all(t % step == 0 for t in ticks) and step in ROUND_STEPS


def test_every_panel_shares_one_time_axis() -> None:
    svg = to_svg([record(0, 600.0), record(1, 1200.0), record(2, 112.0)], "t")
    root = parse(svg)
    ticks = texts(root, "tick")
    per_panel = len(ticks) // 3
    panels = [ticks[i * per_panel:(i + 1) * per_panel] for i in range(3)]
    assert [t.text for t in panels[0]] == ["0", "5m", "10m", "15m", "20m"]
    for panel in panels[1:]:
        assert [(t.get("x"), t.text) for t in panel] == [(t.get("x"), t.text) for t in panels[0]]
    # The same duration is the same width in every panel: weight_load took 300 s and 600 s.
    loads = {r.get("width") for r in root.iterfind(".//s:rect", SVG_NS)
             if (r.findtext("s:title", "", SVG_NS) or "").startswith("TP0 weight_load")}
    x0, x1 = (float(t.get("x") or 0) for t in panels[0][:2])
    assert {round(float(w) / (x1 - x0) * 300) for w in loads} == {300, 600, 56}


def test_the_title_does_not_overlap_the_first_caption() -> None:
    root = parse(to_svg([record(0, 600.0)], "sglang-kimi.service: the last 1 start-up(s)"))
    [title] = texts(root, "title")
    caption = texts(root, "panel")[0]
    title_bottom = float(title.get("y") or 0) + 15 * 0.25  # baseline + descent of 15 px text
    caption_top = float(caption.get("y") or 0) - 13  # baseline - ascent of 13 px text
    assert title_bottom < caption_top


def test_verdict_marks_are_labelled_and_ranks_alike_share_one_label() -> None:
    at = T0 + 3600 + 1000
    stalled_all = tuple(("stalled", f"TP{r}", "weight_load", at) for r in range(8))
    straggler = (("straggler", "TP3", "cuda_graph_capture", T0 + 400),)
    root = parse(to_svg([record(0, 600.0, straggler), record(1, 1005.0, stalled_all)], "t"))
    marks = [p for p in root.iterfind(".//s:path", SVG_NS) if p.get("class") == "verdict"]
    assert len(marks) == 1 + 8 + 1  # one per rank, and the legend's
    labels = texts(root, "mark")
    assert [t.text for t in labels] == ["straggler in cuda_graph_capture", "TP0–TP7: stalled in weight_load"]
    for label in labels:  # inside the picture, whichever side of its mark it is on
        x, size = float(label.get("x") or 0), len(label.text or "") * LABEL_CHAR
        assert (0 <= x - size if label.get("text-anchor") == "end" else x + size <= WIDTH)


def test_no_start_ups_still_draws_a_picture() -> None:
    root = parse(to_svg([], "t"))
    assert texts(root, "panel")[0].text == "no start-ups recorded yet"
