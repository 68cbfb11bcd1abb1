"""The overview's chart: outcomes per day or week as a stacked bar chart in inline SVG.

Drawn here, on the server, with no script and nothing fetched: a ``<rect>`` per outcome and
period, each with a ``<title>`` (the browser's own tooltip). Every text in it is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["COLOURS", "MAX_BARS", "stacked_bars"]

# One colour per outcome, the same in the chart and the histogram (style.css).
COLOURS = {
    "success": "#2e7d32",
    "failure": "#c62828",
    "partial": "#f9a825",
    "unknown": "#9e9e9e",
    "claimed_success": "#81c784",
    "abandoned": "#6d4c41",
}
# The most recent periods drawn; older ones are summed in the histogram only.
MAX_BARS = 120
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 960, 260, 48, 40, 10


def stacked_bars(
    periods: Sequence[tuple[str, dict[str, int]]], outcomes: Sequence[str], *, label: str
) -> Markup:
    """An ``<svg id="outcomes-chart">`` of *periods* (oldest first: a name and its counts by
    outcome), one stacked bar each."""
    plot_w, plot_h = WIDTH - LEFT - 10, HEIGHT - BOTTOM - TOP
    top = max((sum(c.values()) for _, c in periods), default=0)
    parts = [
        f'<svg id="outcomes-chart" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
    ]
    base = TOP + plot_h
    parts.append(
        f'<line x1="{LEFT}" y1="{base}" x2="{LEFT + plot_w}" y2="{base}" stroke="#444"/>'
        f'<text x="{LEFT - 6}" y="{TOP + 10}" text-anchor="end" font-size="11">{top}</text>'
        f'<text x="{LEFT - 6}" y="{base}" text-anchor="end" font-size="11">0</text>'
    )
    if periods and top:
        step = plot_w / len(periods)
        bar = max(1.0, step * 0.8)
        # Label at most ~12 periods on the axis, evenly spaced.
        every = max(1, len(periods) // 12)
        for n, (name, counts) in enumerate(periods):
            x = LEFT + n * step + (step - bar) / 2
            y = float(base)
            total = sum(counts.values())
            for outcome in outcomes:
                count = counts.get(outcome, 0)
                if not count:
                    continue
                h = count / top * plot_h
                y -= h
                parts.append(
                    f'<rect class="bar o-{escape(outcome)}" x="{x:.1f}" y="{y:.1f}" '
                    f'width="{bar:.1f}" height="{h:.1f}" fill="{COLOURS.get(outcome, "#000")}">'
                    f"<title>{escape(name)}: {count} {escape(outcome)} of {total}</title></rect>"
                )
            if n % every == 0:
                parts.append(
                    f'<text x="{x + bar / 2:.1f}" y="{base + 14}" text-anchor="middle" '
                    f'font-size="10">{escape(name)}</text>'
                )
    else:
        parts.append(
            f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle">'
            f"no dated episode</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
