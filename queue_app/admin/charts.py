"""Charts drawn on the server as inline SVG: no JavaScript library, nothing from a CDN.

Each function returns safe markup sized by a ``viewBox`` so it scales with
the page; every bar carries a ``<title>`` (the browser's tooltip) and the
chart an ``aria-label``, so the numbers are readable without the picture.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

STATUS_COLOURS = {
    "waiting": "#94a3b8",
    "queued": "#2563eb",
    "processing": "#d97706",
    "cancelling": "#a16207",
    "completed": "#16a34a",
    "failed": "#dc2626",
    "cancelled": "#6b7280",
    "expired": "#9333ea",
}
POSTGRES_COLOUR = "#336791"
REDIS_COLOUR = "#d82c20"
AXIS_COLOUR = "#9ca3af"
FONT = 'font-family="system-ui, sans-serif" font-size="11"'
LEGEND_STEP = 150


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    colour: str


@dataclass(frozen=True)
class BarGroup:
    """Bars drawn together under one label (e.g. one queue: PostgreSQL vs Redis)."""

    label: str
    bars: Sequence[Bar]


@dataclass(frozen=True)
class Column:
    """One time bucket of a stacked column chart; ``values`` follow the series order."""

    label: str
    values: Sequence[int]


def _svg(width: int, height: int, label: str, body: SafeString) -> SafeString:
    return format_html(
        '<svg class="queue-chart" viewBox="0 0 {} {}" width="100%" role="img" aria-label="{}" '
        'xmlns="http://www.w3.org/2000/svg">{}</svg>',
        width,
        height,
        label,
        body,
    )


def _legend(series: Sequence[tuple[str, str]], *, right: int) -> SafeString:
    """Colour keys in one row, ending at ``right``."""
    return format_html_join(
        "",
        '<rect x="{}" y="0" width="10" height="10" fill="{}"></rect>'
        '<text x="{}" y="9" ' + FONT + ' fill="#374151">{}</text>',
        (
            (start + i * LEGEND_STEP, colour, start + 14 + i * LEGEND_STEP, name)
            for i, (name, colour) in enumerate(series)
            for start in [right - LEGEND_STEP * len(series)]
        ),
    )


def grouped_bars(
    groups: Sequence[BarGroup], *, label: str, legend: Sequence[tuple[str, str]] = (), width: int = 480
) -> SafeString:
    """Horizontal bars, one row per bar, grouped under their group's label; a common linear scale.

    ``legend`` = (name, colour) keys drawn above the bars, for groups of several bars.
    """
    label_width, value_width, bar_height, gap = 110, 70, 14, 4
    scale_width = width - label_width - value_width
    peak = max((bar.value for group in groups for bar in group.bars), default=0) or 1
    parts: list[SafeString] = [_legend(legend, right=width)] if legend else []
    y = 20 if legend else 4
    for group in groups:
        parts.append(
            format_html(
                '<text x="0" y="{}" {} fill="#111827" dominant-baseline="middle">{}</text>',
                y + bar_height / 2,
                mark_safe(FONT),
                group.label,
            )
        )
        for bar in group.bars:
            length = round(scale_width * bar.value / peak, 1)
            name = f"{group.label} {bar.label}".strip()
            parts.append(
                format_html(
                    '<g class="bar" data-label="{}" data-value="{}"><title>{}: {}</title>'
                    '<rect x="{}" y="{}" width="{}" height="{}" rx="2" fill="{}"></rect>'
                    '<text x="{}" y="{}" {} fill="#374151" dominant-baseline="middle">{}</text></g>',
                    name,
                    bar.value,
                    name,
                    f"{bar.value:,}",
                    label_width,
                    y,
                    max(length, 1 if bar.value else 0),
                    bar_height,
                    bar.colour,
                    label_width + length + 4,
                    y + bar_height / 2,
                    mark_safe(FONT),
                    f"{bar.value:,}",
                )
            )
            y += bar_height + gap
        y += gap * 2
    return _svg(width, max(y, 20), label, mark_safe("".join(parts)))


def stacked_columns(
    columns: Sequence[Column],
    *,
    series: Sequence[tuple[str, str]],
    label: str,
    tick_every: int = 10,
    width: int = 720,
    height: int = 180,
) -> SafeString:
    """Stacked vertical columns (e.g. jobs per minute), ``series`` = (name, colour) bottom up."""
    left, bottom, top = 36, 18, 8
    plot_height = height - bottom - top
    slot = (width - left) / max(len(columns), 1)
    peak = max((sum(column.values) for column in columns), default=0)
    scale = plot_height / peak if peak else 0
    parts: list[SafeString] = [
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}"></line>'
            '<text x="{}" y="{}" {} fill="#374151" text-anchor="end">{}</text>'
            '<text x="{}" y="{}" {} fill="#374151" text-anchor="end">0</text>',
            left,
            height - bottom,
            width,
            height - bottom,
            AXIS_COLOUR,
            left - 4,
            top + 8,
            mark_safe(FONT),
            f"{peak:,}",
            left - 4,
            height - bottom,
            mark_safe(FONT),
        )
    ]
    for index, column in enumerate(columns):
        x = left + index * slot
        y = height - bottom
        pairs = list(zip(series, column.values, strict=True))
        summary = ", ".join(f"{name} {value:,}" for (name, _), value in pairs)
        rects = []
        for (_, colour), value in pairs:
            if not value:
                continue
            bar = value * scale
            y -= bar
            rects.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"></rect>',
                    round(x + 1, 1),
                    round(y, 1),
                    round(max(slot - 2, 1), 1),
                    round(bar, 1),
                    colour,
                )
            )
        parts.append(
            format_html(
                '<g class="column" data-label="{}" data-total="{}"><title>{}: {}</title>{}</g>',
                column.label,
                sum(column.values),
                column.label,
                summary,
                mark_safe("".join(rects)),
            )
        )
        if index % tick_every == 0:
            parts.append(
                format_html(
                    '<text x="{}" y="{}" {} fill="#374151">{}</text>',
                    round(x, 1),
                    height - 4,
                    mark_safe(FONT),
                    column.label,
                )
            )
    return _svg(width, height, label, mark_safe("".join(parts) + _legend(series, right=width)))
