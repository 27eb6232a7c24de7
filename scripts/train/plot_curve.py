#!/usr/bin/env python3
"""plot_curve.py - a training curve JSON (rows of step + metrics) as a plain SVG line plot.

Usage: plot_curve.py CURVE.json OUT.svg METRIC [METRIC ...]. Each metric gets its own line,
scaled to its own [min, max] (printed in the legend); the x axis is the step, and vertical
marks show where the context length changes. Written atomically."""
import json
import os
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def main():
    curve, out, metrics = sys.argv[1], sys.argv[2], sys.argv[3:]
    rows = json.load(open(curve))["rows"]
    W, H, ml, mr, mt, mb = 720, 360, 60, 20, 30, 50
    smax = max(r["step"] for r in rows)
    X = lambda s: ml + (W - ml - mr) * s / smax  # noqa: E731
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
             'font-family="sans-serif" font-size="12">' % (W, H),
             '<rect width="100%" height="100%" fill="white"/>',
             '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (ml, H - mb, W - mr, H - mb)]
    prev = None
    for r in rows:
        if prev is not None and r.get("ctx") != prev:
            x = X(r["step"])
            parts.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#bbb" '
                         'stroke-dasharray="4"/><text x="%.1f" y="%d" fill="#888">ctx %s</text>'
                         % (x, mt, x, H - mb, x + 3, mt + 12, r.get("ctx")))
        prev = r.get("ctx")
    for i in range(0, 6):
        s = smax * i / 5
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (X(s), H - mb + 16, s))
    parts.append('<text x="%d" y="%d" text-anchor="middle">step</text>' % ((W + ml) / 2, H - 12))
    for k, m in enumerate(metrics):
        pts = [(r["step"], r[m]) for r in rows if m in r]
        if not pts:
            continue
        lo = min(v for _, v in pts)
        hi = max(v for _, v in pts)
        span = hi - lo or 1.0
        Y = lambda v: H - mb - (H - mt - mb) * (v - lo) / span  # noqa: E731
        c = COLORS[k % len(COLORS)]
        parts.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>'
                     % (c, " ".join("%.1f,%.1f" % (X(s), Y(v)) for s, v in pts)))
        parts.append('<text x="%d" y="%d" fill="%s">%s (%.3g .. %.3g)</text>'
                     % (ml + 10 + 220 * k, 16, c, m, lo, hi))
    parts.append("</svg>")
    with open(out + ".tmp", "w") as f:
        f.write("\n".join(parts) + "\n")
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
