"""Small charts drawn on the server as inline SVG: no JavaScript, no CDN, works offline."""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT, GAP = 240, 48, 1


def bar_chart(values: list[float | None], *, labels: list[str], unit: str = "s") -> SafeString:
    """Return an SVG bar chart of ``values`` (None: no bar), one ``<title>`` per bar.

    Bars share one scale, from 0 to the largest value, which the chart's own
    title states, so two charts are compared by their numbers, not by height.
    """
    top = max((v for v in values if v is not None), default=0.0)
    width = WIDTH / max(len(values), 1)
    bars = []
    for index, (value, label) in enumerate(zip(values, labels, strict=True)):
        if value is None:
            continue
        height = max(HEIGHT * value / top, 1.0) if top > 0 else 1.0
        bars.append(
            '<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %s</title></rect>'
            % (
                index * width,
                HEIGHT - height,
                max(width - GAP, 1.0),
                height,
                escape(label),
                escape(_format(value, unit)),
            )
        )
    return mark_safe(
        '<svg class="scheduler-chart" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
        'viewBox="0 0 %d %d" role="img" aria-label="max %s">'
        '<rect class="frame" x="0" y="0" width="%d" height="%d" fill="none"/>%s</svg>'
        % (WIDTH, HEIGHT, WIDTH, HEIGHT, escape(_format(top, unit)), WIDTH, HEIGHT, "".join(bars))
    )


def _format(value: float, unit: str) -> str:
    return "%.3g %s" % (value, unit)
