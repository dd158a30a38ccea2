"""Server-rendered SVG: bars to scale, labels escaped."""

from __future__ import annotations

import re

from queue_app.admin import charts


def test_grouped_bars_scale_to_the_largest_value_and_escape_labels():
    svg = charts.grouped_bars(
        [
            charts.BarGroup("<script>alert(1)</script>", [charts.Bar("", 10, "#000")]),
            charts.BarGroup("half", [charts.Bar("", 5, "#000")]),
            charts.BarGroup("none", [charts.Bar("", 0, "#000")]),
        ],
        label="test",
        width=480,
    )
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    widths = [float(w) for w in re.findall(r'<rect x="110" y="[\d.]+" width="([\d.]+)"', svg)]
    assert widths == [300.0, 150.0, 0.0]


def test_stacked_columns_stack_series_and_label_every_tick():
    columns = [charts.Column(f"10:{i:02d}", [i, 1]) for i in range(4)]
    svg = charts.stacked_columns(
        columns, series=[("ok", "#0f0"), ("failed", "#f00")], label="t", tick_every=2
    )
    totals = re.findall(r'data-label="(10:\d\d)" data-total="(\d+)"', svg)
    assert totals == [("10:00", "1"), ("10:01", "2"), ("10:02", "3"), ("10:03", "4")]
    assert re.findall(r"<text[^>]*>(10:\d\d)</text>", svg) == ["10:00", "10:02"]
    # The tallest column fills the plot: its rects add up to the plot height (180 - 18 - 8).
    last = re.search(r'data-label="10:03".*?</g>', svg).group(0)
    assert sum(float(h) for h in re.findall(r'height="([\d.]+)"', last)) == 154.0


def test_an_empty_chart_still_renders():
    assert "<svg" in charts.stacked_columns([], series=[("ok", "#0f0")], label="empty")
    assert "<svg" in charts.grouped_bars([], label="empty")
