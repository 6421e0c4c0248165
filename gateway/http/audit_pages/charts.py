"""Inline SVG charts for the compliance overview, drawn on the server: no script, no external
resource, every value escaped. Each bar is a link to the traces behind it and carries its number
as a text label (`class="value"`), so a reader (or a test) reads the figure off the chart itself.
Presentation attributes only (fill, width): the page's CSP allows no inline style."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from audit.review import Bar

COLOURS = {
    "allow": "#1b6e2f",
    "deny": "#b3261e",
    "error": "#8a4b08",
    "rate_limited": "#6b4fa1",
    "invalid": "#7a848e",
}
BAR = "#4a6b8a"


@dataclass(frozen=True, slots=True)
class Row:
    """One bar of a ranked chart: its label, its number, where it links."""

    label: str
    value: int
    href: str


def ranked(chart_id: str, title: str, rows: Sequence[Row], width: int = 560) -> Markup:
    """Horizontal bars, one per row, longest first as given."""
    if not rows:
        return Markup('<p class="note" id="{}-empty">None in this period.</p>').format(chart_id)
    line, label_w, top = 22, 200, max(r.value for r in rows) or 1
    parts = [
        Markup('<svg class="chart" id="{}" role="img" aria-label="{}" width="{}" height="{}" viewBox="0 0 {} {}">').format(
            chart_id, title, width, line * len(rows) + 4, width, line * len(rows) + 4
        )
    ]
    for i, row in enumerate(rows):
        y = i * line + 2
        length = max(1, int((width - label_w - 60) * row.value / top))
        parts.append(
            Markup(
                '<a href="{href}" class="bar-link"><g class="bar" data-label="{label}" data-value="{value}">'
                "<title>{label}: {value}</title>"
                '<text class="label" x="0" y="{ty}" font-size="12">{short}</text>'
                '<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}"></rect>'
                '<text class="value" x="{vx}" y="{ty}" font-size="12">{value}</text></g></a>'
            ).format(
                href=row.href,
                label=row.label,
                short=row.label if len(row.label) <= 30 else row.label[:29] + "…",
                value=row.value,
                ty=y + 14,
                x=label_w,
                y=y,
                w=length,
                h=line - 6,
                fill=BAR,
                vx=label_w + length + 6,
            )
        )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


@dataclass(frozen=True, slots=True)
class Mark:
    """A policy revision taking effect: where on the time axis, and its short name."""

    at: int  # bar index
    label: str


def timeline(
    chart_id: str,
    bars: Sequence[Bar],
    outcomes: Sequence[str],
    href: Callable[[Bar, str], str],
    marks: Sequence[Mark] = (),
    width: int = 900,
    height: int = 220,
) -> Markup:
    """Stacked bars of calls by outcome over time, with the revisions marked as vertical lines."""
    counts = [[bar.by_outcome.get(o, 0) for o in outcomes] for bar in bars]
    top = max((sum(c) for c in counts), default=0) or 1
    left, bottom = 40, 30
    step = (width - left - 10) / max(1, len(bars))
    # A total wider than its bar is drawn upright (rotated), with room for it above the tallest bar.
    upright = step < len(str(top)) * 6.5
    plot_h = height - bottom - (len(str(top)) * 6 + 10 if upright else 20)
    bar_w = max(2.0, step * 0.8)
    parts = [
        Markup(
            '<svg class="chart" id="{}" role="img" aria-label="Calls over time by outcome" width="{}" height="{}" viewBox="0 0 {} {}">'
        ).format(chart_id, width, height, width, height),
        Markup('<text class="axis" x="0" y="12" font-size="11">{}</text>').format(top),
        Markup('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#59636e"></line>').format(
            left, height - bottom, width - 10, height - bottom
        ),
    ]
    for i, (bar, values) in enumerate(zip(bars, counts)):
        x = left + i * step
        y = float(height - bottom)
        parts.append(
            Markup('<g class="period" data-start="{}" data-end="{}" data-total="{}">').format(bar.start, bar.end, sum(values))
        )
        for outcome, n in zip(outcomes, values):
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            parts.append(
                Markup(
                    '<a href="{href}" class="bar-link"><rect class="segment" data-outcome="{o}" data-value="{n}" '
                    'x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"><title>{o}: {n} ({start} to {end})</title></rect></a>'
                ).format(
                    href=href(bar, outcome),
                    o=outcome,
                    n=n,
                    x=x,
                    y=y,
                    w=bar_w,
                    h=h,
                    fill=COLOURS.get(outcome, BAR),
                    start=bar.start,
                    end=bar.end,
                )
            )
        if sum(values):
            parts.append(_total(sum(values), x, y, bar_w, upright))
        parts.append(Markup("</g>"))
    for mark in marks:
        x = left + mark.at * step
        parts.append(
            Markup(
                '<g class="revision-mark" data-revision="{label}"><line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{y}" '
                'stroke="#23303d" stroke-dasharray="4 3"></line><text x="{tx:.1f}" y="24" font-size="10">{short}</text></g>'
            ).format(label=mark.label, x=x, y=height - bottom, tx=x + 3, short=mark.label[:19])
        )
    first, last = (bars[0].start, bars[-1].end) if bars else ("", "")
    parts.append(Markup('<text x="{}" y="{}" font-size="11">{}</text>').format(left, height - 10, first))
    parts.append(Markup('<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>').format(width - 10, height - 10, last))
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def _total(total: int, x: float, y: float, bar_w: float, upright: bool) -> Markup:
    """A bar's total above it: upright (rotated) when it is wider than its bar."""
    if upright:
        cx = x + bar_w / 2 + 3
        return Markup(
            '<text class="value" x="{:.1f}" y="{:.1f}" font-size="10" transform="rotate(-90 {:.1f} {:.1f})">{}</text>'
        ).format(cx, y - 3, cx, y - 3, total)
    return Markup('<text class="value" x="{:.1f}" y="{:.1f}" font-size="10">{}</text>').format(x, y - 2, total)


def legend(outcomes: Sequence[str], totals: dict[str, int], href: Callable[[str], str]) -> Markup:
    items = [
        Markup(
            '<li><a href="{}" class="legend" data-outcome="{}"><svg width="10" height="10"><rect width="10" height="10" fill="{}"></rect></svg> {} <strong class="total">{}</strong></a></li>'
        ).format(href(o), o, COLOURS.get(o, BAR), o.replace("_", " "), totals.get(o, 0))
        for o in outcomes
    ]
    return Markup('<ul class="legend" id="outcome-legend">') + Markup("").join(items) + Markup("</ul>")


__all__ = ["Mark", "Row", "escape", "legend", "ranked", "timeline"]
