"""The report's plots written as SVG here: axes, ticks, step lines, bars, reference lines, legends.

Why our own writer: matplotlib cost the page about 3 CPU-seconds (its import, layout engine and text rendering)
for a few binned plots that need only rectangles, paths and text placed by arithmetic. Text widths are estimated
from the font size (no font metrics), so margins are generous rather than tight. No ids: many plots share a page.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from html import escape

PLOT_BG = "#eef2f8"  # a plot's background: the page frames plots with it (and the browser test finds them by it)
WIDTH = 1056  # px, the page's column
LINEAR, LOG, TIME = "linear", "log", "time"
TICK, SMALL, TITLE = 11, 10, 13  # font sizes (px): tick and axis labels, legends and long category labels, titles
CHAR = 0.6  # a character's width in font sizes (DejaVu Sans averages a little under)
TIME_RANGE = (0, 253_402_300_799_000)  # ms since the epoch a date can spell: 1970 to the end of 9999; a time axis stays inside
_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500)
_S, _M, _H, _D = 1000, 60_000, 3_600_000, 86_400_000
TIME_STEPS = (*_MS, *(_S * k for k in (1, 2, 5, 10, 15, 30)), *(_M * k for k in (1, 2, 5, 10, 15, 30)), *(_H * k for k in (1, 2, 3, 6, 12)))


def nice_step(span: float, most: int) -> float:
    """The smallest step of 1, 2 or 5 x 10^k that cuts `span` into at most `most` parts."""
    raw = span / max(1, most)
    k = 10.0 ** math.floor(math.log10(raw))
    return next(m * k for m in (1, 2, 5, 10) if m * k >= raw * (1 - 1e-9))


def linear_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """Ticks of the finest nice step whose multiples from at or below `lo` to at or above `hi` are at most `most` apart."""
    if hi <= lo:
        hi = lo + 1
    step = nice_step(hi - lo, most)
    while math.ceil(hi / step - 1e-9) - math.floor(lo / step + 1e-9) > most:
        step = nice_step(step * 1.01, 1)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(i * step, max(0, 1 - math.floor(math.log10(step)))) for i in range(first, last + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """The powers of ten around [lo, hi] (lo > 0), at least one decade."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0**k for k in range(a, max(b, a + 1) + 1)]


def time_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """Times (ms since the epoch) inside [lo, hi] and TIME_RANGE on whole units: multiples of a step of TIME_STEPS, else
    of whole days."""
    lo, hi = max(lo, TIME_RANGE[0]), min(hi, TIME_RANGE[1])
    step = next((s for s in TIME_STEPS if (hi - lo) / s <= most), None) or max(_D, round(nice_step((hi - lo) / _D, most)) * _D)
    return [i * step for i in range(math.ceil(lo / step), math.floor(hi / step) + 1)]


def time_labels(ticks: list[float]) -> list[str]:
    """UTC labels as fine as the ticks' step; the first tick and each of a new day also say the date."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1
    fmt = "%Y-%m-%d" if step % _D == 0 else "%H:%M" if step % _M == 0 else "%H:%M:%S" if step % _S == 0 else "%H:%M:%S.%f"
    out, day = [], None
    for t in ticks:
        d = datetime.fromtimestamp(t / 1000, tz=timezone.utc)
        s = d.strftime(fmt)[: -3 if fmt.endswith("%f") else None]
        out.append(s if fmt == "%Y-%m-%d" or d.date() == day else f"{d:%Y-%m-%d} {s}")
        day = d.date()
    return out


def _f(v: float) -> str:
    return f"{v:.1f}"


def _width(text: str, size: float) -> float:
    return len(text) * size * CHAR


def _text(x: float, y: float, s: str, size: int = TICK, anchor: str = "middle", color: str = "#222", rotate: float = 0, role: str = "") -> str:
    """A label; `role` (xt, yt: a tick's, key: a legend entry's) names what it labels for whoever reads the plot back,
    and a tick's label is where its tick is (x for the x axis; y, centred, for the y axis)."""
    turn = f' transform="rotate({_f(-rotate)} {_f(x)} {_f(y)})"' if rotate else ""
    kind = (f' class="{role}"' if role else "") + (' dominant-baseline="central"' if role == "yt" else "")
    return f'<text{kind} x="{_f(x)}" y="{_f(y)}" font-size="{size}" text-anchor="{anchor}" fill="{color}"{turn}>{escape(s)}</text>'


def _dash(dash: str) -> str:
    return f' stroke-dasharray="{dash}"' if dash else ""


def _line(x1: float, x2: float, y1: float, y2: float, color: str = "#333", width: float = 0.8, dash: str = "") -> str:
    return f'<line x1="{_f(x1)}" x2="{_f(x2)}" y1="{_f(y1)}" y2="{_f(y2)}" stroke="{color}" stroke-width="{width}"{_dash(dash)}/>'


class Axes:
    """One panel: marks in data units; its scales, frame and legend are worked out when the figure is written.
    A linear axis chosen from the marks starts at 0 (every such axis here counts something)."""

    def __init__(self, title: str = "", xlabel: str = "", ylabel: str = "", x: str = LINEAR, y: str = LINEAR):
        self.title, self.xlabel, self.ylabel = title, xlabel, ylabel
        self.kind = {"x": x, "y": y}
        self.lim: dict[str, tuple[float, float] | None] = {"x": None, "y": None}  # (lo, hi) as given; lo maps to left or bottom
        self.ticks: dict[str, list[tuple[float, str]] | None] = {"x": None, "y": None}  # as given: (value, label)
        self.tick_size = {"x": TICK, "y": TICK}
        self.rotate = 0  # the x tick labels' angle, degrees
        self.xtick_labels = True  # off for the upper of panels stacked on one x
        self.grid = "y"
        self.legend: list[tuple[str, str, str | None]] = []  # (label, colour, a line's dash pattern; None for a patch)
        self.legend_inside = False  # lower right inside the frame; else outside on the right
        # ("step", xs, ys, colour, width, dash), ("rect", x0, x1, y0, y1, colour, opacity), ("vline", x, colour, width, dash, text)
        self.marks: list[tuple] = []
        self.data: dict[str, list[float]] = {"x": [], "y": []}  # the marks' extent in data units

    def step(self, xs, ys, color: str, label: str, width: float = 1.6, dash: str = "") -> None:
        """A line holding ys[i] from xs[i] to xs[i + 1] (the last value repeats the one before)."""
        self.marks.append(("step", [float(v) for v in xs], [float(v) for v in ys], color, width, dash))
        self.data["x"] += self.marks[-1][1]
        self.data["y"] += self.marks[-1][2]
        self.legend.append((label, color, dash))

    def rect(self, x0: float, x1: float, y0: float, y1: float, color: str, opacity: float = 1.0) -> None:
        if x1 != x0 and y1 != y0:
            self.marks.append(("rect", float(x0), float(x1), float(y0), float(y1), color, opacity))
            self.data["x"] += self.marks[-1][1:3]
            self.data["y"] += self.marks[-1][3:5]

    def bars(self, xs, heights, width: float, color: str, label: str | None = None, bottom=None, horizontal: bool = False) -> None:
        """Bars of `width` centred on xs (on the y axis when horizontal), from `bottom` (default 0) up by `heights`."""
        for i, (x, h) in enumerate(zip(xs, heights, strict=True)):
            b = 0.0 if bottom is None else float(bottom[i])
            box = (b, b + float(h), x - width / 2, x + width / 2) if horizontal else (x - width / 2, x + width / 2, b, b + float(h))
            self.rect(*box, color)
        if label is not None:
            self.legend.append((label, color, None))

    def vline(self, x: float, color: str, width: float = 1.0, dash: str = "", text: str = "") -> None:
        """A vertical reference line, `text` beside its top (ending at the line)."""
        self.marks.append(("vline", float(x), color, width, dash, text))
        self.data["x"].append(float(x))

    def scale(self, axis: str, most: int) -> tuple[float, float, list[tuple[float, str]]]:
        """(lo, hi, ticks) of an axis: its limits as given or chosen from the marks, its ticks as given or chosen."""
        kind, lim, given, data = self.kind[axis], self.lim[axis], self.ticks[axis], self.data[axis]
        if kind == LOG:
            pos = [v for v in data if v > 0] or [1.0]
            ticks = log_ticks(*(lim or (min(pos), max(pos))))
            lim = lim or (ticks[0], ticks[-1])
            labels = [f"{v:,.0f}" if v >= 1 else f"{v:g}" for v in ticks]
        elif kind == TIME:
            lim = lim or (min(data), max(data))
            ticks = time_ticks(*lim, most)
            labels = time_labels(ticks) if ticks else []
        else:
            ticks = linear_ticks(*(sorted(lim) if lim else (min([0.0, *data]), max([0.0, *data]))), most)
            labels = [f"{v:,.{max(0, -math.floor(math.log10(ticks[1] - ticks[0])))}f}" for v in ticks]  # as many decimals as the step has
            lim = lim or (ticks[0], ticks[-1])
        if given is not None:
            return lim[0], lim[1], given
        a, b = sorted(lim)
        return lim[0], lim[1], [(v, s) for v, s in zip(ticks, labels, strict=True) if a - 1e-9 * (b - a) <= v <= b + 1e-9 * (b - a)]


def _mapper(kind: str, lo: float, hi: float, a: float, b: float):
    """Data -> px along one axis: lo to a, hi to b, clamped to [a, b]."""
    f = (lambda v: math.log10(max(v, 1e-300))) if kind == LOG else float
    f0, span = f(lo), (f(hi) - f(lo)) or 1.0
    low, high = min(a, b), max(a, b)
    return lambda v: min(high, max(low, a + (f(v) - f0) / span * (b - a)))


def _margins(ax: Axes, yticks) -> list[float]:
    """[left, right, top, bottom] around a panel's frame: room for its tick labels, axis labels, title, legend."""
    left = 14 + (18 if ax.ylabel else 0) + max((_width(s, ax.tick_size["y"]) for _, s in yticks), default=0)
    right = 16 + (0 if ax.legend_inside or not ax.legend else 34 + max(_width(s, SMALL) for s, _, _ in ax.legend))
    top = 10 + (22 if ax.title else 0)
    ticks = ax.ticks["x"] or []
    size = ax.tick_size["x"]
    high = max((_width(s, size) for _, s in ticks), default=0) * math.sin(math.radians(ax.rotate)) + size if ax.rotate else size
    return [left, right, top, 10 + (20 if ax.xlabel else 0) + (high + 8 if ax.xtick_labels else 0)]


def _legend(ax: Axes, left: float, top: float, right: float, bottom: float) -> list[str]:
    wide = 34 + max(_width(s, SMALL) for s, _, _ in ax.legend)
    x, y = (right - wide - 6, bottom - 14 * len(ax.legend) - 10) if ax.legend_inside else (right + 10, top)
    box = f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(wide)}" height="{14 * len(ax.legend) + 6}" fill="white" fill-opacity="0.8" stroke="#ccc"/>'
    out = [box] if ax.legend_inside else []
    for i, (label, color, dash) in enumerate(ax.legend):
        row = y + 10 + 14 * i
        if dash is None:
            out.append(f'<rect x="{_f(x + 6)}" y="{_f(row - 4)}" width="18" height="8" fill="{color}"/>')
        else:
            out.append(_line(x + 5, x + 25, row, row, color, 2, dash))
        out.append(_text(x + 30, row + 3.5, label, SMALL, "start", role="key"))
    return out


def _panel(ax: Axes, yscale, box: tuple[float, float, float, float]) -> list[str]:
    left, top, right, bottom = box
    x0, x1, xticks = ax.scale("x", max(2, int((right - left) // (150 if ax.kind["x"] == TIME else 90))))
    y0, y1, yticks = yscale
    px, py = _mapper(ax.kind["x"], x0, x1, left, right), _mapper(ax.kind["y"], y0, y1, bottom, top)
    out = [f'<rect x="{_f(left)}" y="{_f(top)}" width="{_f(right - left)}" height="{_f(bottom - top)}" fill="white"/>']
    grid = [(px(v), px(v), top, bottom) for v, _ in xticks] if ax.grid == "x" else [(left, right, py(v), py(v)) for v, _ in yticks]
    out += [_line(*g, "#dcdcdc") for g in grid]
    for m in ax.marks:
        if m[0] == "rect":
            a, b, c, d = px(m[1]), px(m[2]), py(m[3]), py(m[4])
            fill = f' fill-opacity="{m[6]:.2f}"' if m[6] < 1 else ""
            out.append(f'<rect x="{_f(min(a, b))}" y="{_f(min(c, d))}" width="{_f(abs(b - a))}" height="{_f(abs(d - c))}" fill="{m[5]}"{fill}/>')
        elif m[0] == "step":
            xs, ys = m[1], m[2]
            path = [f"M{_f(px(xs[0]))} {_f(py(ys[0]))}"]
            for i in range(1, len(xs)):
                path.append(f"H{_f(px(xs[i]))}")
                if ys[i] != ys[i - 1]:
                    path.append(f"V{_f(py(ys[i]))}")
            out.append(f'<path d="{"".join(path)}" fill="none" stroke="{m[3]}" stroke-width="{m[4]}"{_dash(m[5])}/>')
        else:
            a = px(m[1])
            out.append(_line(a, a, top, bottom, m[2], m[3], m[4]))
            if m[5]:
                out.append(_text(a - 2, top + SMALL + 2, m[5], SMALL, "end", m[2]))
    out.append(f'<rect x="{_f(left)}" y="{_f(top)}" width="{_f(right - left)}" height="{_f(bottom - top)}" fill="none" stroke="#333" stroke-width="0.8"/>')
    for v, s in yticks:
        a = py(v)
        out.append(_line(left - 4, left, a, a))
        out.append(_text(left - 6, a, s, ax.tick_size["y"], "end", role="yt"))
    size = ax.tick_size["x"]
    for v, s in xticks:
        a = px(v)
        out.append(_line(a, a, bottom, bottom + 4))
        if ax.xtick_labels:
            turned = _text(a, bottom + 8 + size * 0.7, s, size, "end", rotate=ax.rotate, role="xt")
            out.append(turned if ax.rotate else _text(a, bottom + 6 + size, s, size, role="xt"))
    if ax.xlabel:
        out.append(_text((left + right) / 2, box[3] + _margins(ax, [])[3] - 14, ax.xlabel))
    if ax.ylabel:
        out.append(_text(left - 10 - max((_width(s, ax.tick_size["y"]) for _, s in yticks), default=0), (top + bottom) / 2, ax.ylabel, rotate=90))
    if ax.title:
        out.append(_text((left + right) / 2, top - 10, ax.title, TITLE))
    return out + (_legend(ax, *box) if ax.legend else [])


def figure(panels: list[Axes], height: float, cols: int = 1) -> str:
    """The panels (rows of `cols`) as one <svg> element to put inline; panels in one column share their frame's
    left and right edges, so that stacked panels line up on their x axis."""
    rows = -(-len(panels) // cols)
    cell_w, cell_h = WIDTH / cols, height / rows
    yscales = [ax.scale("y", max(3, min(8, int(cell_h // 45)))) for ax in panels]
    margins = [_margins(ax, ys[2]) for ax, ys in zip(panels, yscales, strict=True)]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{round(height)}" viewBox="0 0 {WIDTH} {round(height)}" '
        f'font-family="DejaVu Sans,Verdana,Arial,sans-serif"><rect width="{WIDTH}" height="{round(height)}" fill="{PLOT_BG}"/>'
    ]
    for i, ax in enumerate(panels):
        r, c = divmod(i, cols)
        left, right = (max(m[k] for m in margins[c::cols]) for k in (0, 1))
        out += _panel(ax, yscales[i], (c * cell_w + left, r * cell_h + margins[i][2], (c + 1) * cell_w - right, (r + 1) * cell_h - margins[i][3]))
    return "".join(out) + "</svg>"
