"""The report's plots: inline SVG written by rmqdump.report.svg (no JavaScript, nothing to load).

Why SVG: the page must open offline and fast in any browser attached to a ticket. An SVG of aggregated bins is a
few tens of KB and draws at once; plotly would inline about 3.5 MB of JavaScript per page and run it before
anything shows. Every plot here is of bins or top-N lists, never one mark per message.
"""

from __future__ import annotations

import numpy as np

from rmqdump.report import collect as K
from rmqdump.report import svg
from rmqdump.report.svg import PLOT_BG as PLOT_BG

TOP_TOPICS = 8
TOP_BARS = 40
INCH = 96  # px: the plots keep the heights they had in inches
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_YLORRD = ("#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026")  # ColorBrewer's YlOrRd


def placed(svg_text: str | None, empty_html: str) -> str:
    """A plot's fragment: the SVG in its frame, or `empty_html` when there was nothing to draw."""
    return f'<div class="plot">{svg_text}</div>' if svg_text else empty_html


def _short(name: str, n: int = 48) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def log_color(n: float, most: float) -> str:
    """A count's colour on a log scale from 1 (pale yellow) to `most` (dark red), between YlOrRd's nine colours."""
    t = min(1.0, max(0.0, float(np.log(max(n, 1)) / np.log(max(most, 2))))) * (len(_YLORRD) - 1)
    i = min(int(t), len(_YLORRD) - 2)
    a, b = (np.array([int(c[k : k + 2], 16) for k in (1, 3, 5)]) for c in _YLORRD[i : i + 2])
    return "#" + "".join(f"{round(v):02x}" for v in a + (b - a) * (t - i))


def rate_plot(traffic: K.Traffic) -> str | None:
    r = traffic.rate
    if r.t0 is None or not r.counts.size:
        return None
    names = r.topic_names()
    per_s = r.per_second()
    totals = r.counts.sum(axis=1)
    order = np.argsort(-totals, kind="stable")
    ax = svg.Axes("Message rate per topic over store time", f"store time (UTC), bins of {K._ms(r.width)}", "messages / s", x=svg.TIME)
    x = r.t0 + np.arange(r.bins + 1) * r.width
    shown = order[:TOP_TOPICS]
    for j, i in enumerate(shown):
        ax.step(x, np.append(per_s[i], per_s[i][-1]), _COLORS[j % len(_COLORS)], f"{_short(names[i])} ({int(totals[i])})")
    rest = order[TOP_TOPICS:]
    if len(rest):
        y = per_s[rest].sum(axis=0)
        ax.step(x, np.append(y, y[-1]), "#555555", f"{len(rest)} other topics ({int(totals[rest].sum())})", width=1.3, dash="5 3")
    return svg.figure([ax], 3.2 * INCH)


def latency_plot(traffic: K.Traffic) -> str | None:
    if not traffic.latency:
        return None
    total = sum(traffic.latency.values())
    used = np.flatnonzero(total)
    lo, hi = int(used.min()), int(used.max())
    idx = np.arange(lo, hi + 1)
    ax = svg.Axes("Born-to-store latency (storeTimestamp - bornTimestamp)", "born-to-store latency (bucket lower edge; each bucket doubles)", "messages")
    names = sorted(traffic.latency, key=lambda t: -int(traffic.latency[t].sum()))
    bottom = np.zeros(len(idx))
    x = np.arange(len(idx))
    for j, t in enumerate(names[:TOP_TOPICS]):
        c = traffic.latency[t][idx].astype(float)
        ax.bars(x, c, 0.85, _COLORS[j % len(_COLORS)], _short(t), bottom)
        bottom += c
    if len(names) > TOP_TOPICS:
        c = sum(traffic.latency[t] for t in names[TOP_TOPICS:])[idx].astype(float)
        ax.bars(x, c, 0.85, "#999999", f"{len(names) - TOP_TOPICS} other topics", bottom)
    ax.lim["x"] = (-0.6, len(idx) - 0.4)
    ax.ticks["x"] = [(i, K.latency_label(int(b))) for i, b in enumerate(idx)]
    ax.tick_size["x"], ax.rotate = svg.SMALL, 45 if len(idx) > 12 else 0
    return svg.figure([ax], 2.8 * INCH)


def hbars(rows: list, outer, inner, name, legend: tuple[str, str], colors: tuple[str, str], xlabel: str, title: str, row_in: float, pad_in: float) -> str:
    """`rows` as horizontal bars, the first on top: a pale outer(row) bar with the darker inner(row) one inside."""
    ax = svg.Axes(title, xlabel)
    y = np.arange(len(rows))[::-1]
    ax.bars(y, [outer(r) for r in rows], 0.8, colors[0], legend[0], horizontal=True)
    ax.bars(y, [inner(r) for r in rows], 0.45, colors[1], legend[1], horizontal=True)
    ax.lim["y"] = (-0.6, len(rows) - 0.4)
    ax.ticks["y"] = [(i, name(r)) for i, r in zip(y, rows, strict=True)]
    ax.tick_size["y"], ax.grid, ax.legend_inside = svg.SMALL, "x", True
    return svg.figure([ax], max(1.6, row_in * len(rows) + pad_in) * INCH)


def _bars(rows: list, by: str, outer, inner, name, legend: tuple[str, str], colors: tuple[str, str], xlabel: str, title: str) -> str:
    """The TOP_BARS rows with the largest by(row), largest on top."""
    rows = sorted(rows, key=lambda r: -getattr(r, by))
    more = f" (top {TOP_BARS} of {len(rows)} by {by.replace('_', ' ')})" if len(rows) > TOP_BARS else ""
    return hbars(rows[:TOP_BARS], outer, inner, name, legend, colors, xlabel, f"{title}{more}", 0.2, 0.8)


def queues_plot(info) -> str | None:
    qs = [q for q in info.queues if q.units or q.max_offset]
    if not qs:
        return None
    return _bars(qs, "max_offset", lambda q: q.max_offset, lambda q: q.units, lambda q: f"{_short(q.topic, 40)}/{q.queue_id}",
                 ("max offset", "units on disk"), ("#c6dbef", "#1f77b4"), "queue offset", "ConsumeQueues: units and max offset")  # fmt: skip


def lag_plot(offsets) -> str | None:
    if offsets is None:
        return None
    rows = [r for r in offsets.rows if r.lag is not None]
    if not rows:
        return None
    return _bars(rows, "lag", lambda r: r.max_offset, lambda r: r.committed,
                 lambda r: f"{_short(r.group, 24)} · {_short(r.topic, 24)}/{r.queue_id} (lag {r.lag})", ("queue max offset", "committed offset"),
                 ("#fdd0a2", "#e6550d"), "queue offset (lag = max - committed)", "Consumer groups: committed offset and lag per queue")  # fmt: skip


def damage_plot(damage: K.DamageMap, info) -> str:
    rows = K.DAMAGE_ROWS
    ax = svg.Axes(
        "Damage map along the CommitLog (colour: findings per bin, log scale; spans: share of the bin covered)",
        f"CommitLog physical offset (bytes; {damage.bins} bins of {damage.width:,.0f} bytes)",
    )
    edges = damage.edges()
    for i, (key, _label) in enumerate(rows):
        c = damage.counts[key]
        for j in np.flatnonzero(c):
            if key in K.SPAN_ROWS:
                color, opacity = "#6b8fb3" if key == K.UNWRITTEN else "#d62629", 0.25 + 0.75 * min(1.0, float(c[j]))
            else:
                color, opacity = log_color(int(c[j]), max(2, int(c.max()))), 1.0
            ax.rect(edges[j], edges[j + 1], i - 0.4, i + 0.4, color, opacity)
    labels = []
    for key, label in rows:
        c = damage.counts[key]
        n = f"{damage.span_bytes.get(key, 0):,} bytes" if key in K.SPAN_ROWS else f"{int(c.sum()):,}"
        extra = damage.unplaced.get(key)
        labels.append(f"{label}: {n}" + (f" (+{extra} unplaced)" if extra else ""))
    ax.ticks["y"] = list(enumerate(labels))
    ax.lim["y"] = (len(rows) - 0.5, -0.5)
    ax.lim["x"] = (damage.lo, damage.hi)
    ax.tick_size["y"], ax.grid = svg.SMALL, "x"
    ax.vline(info.commitlog.data_end, "#333333", 1, "1 2")
    r = info.recovery
    if r is not None:
        ax.vline(r.valid_end, "#d62728", 1.3, "5 3", "restart keeps up to here")
    return svg.figure([ax], (0.32 * len(rows) + 1.2) * INCH)


def index_plot(stats: list[K.IndexStats]) -> str | None:
    ok = [s for s in stats if s.error is None]
    if not ok:
        return None
    a1 = svg.Axes("Fill and slot use", ylabel="% of capacity")
    a2 = svg.Axes("Keys (entries) per file")
    x = np.arange(len(ok))
    names = [s.name for s in ok]
    a1.bars(x - 0.2, [100 * (s.fill or 0) for s in ok], 0.4, "#1f77b4", "entries used")
    a1.bars(x + 0.2, [100 * (s.slot_use or 0) for s in ok], 0.4, "#ff7f0e", "slots used")
    a1.lim["y"], a1.legend_inside = (0, 105), True
    a2.bars(x, [s.keys for s in ok], 0.8, "#2ca02c")
    step = max(1, len(ok) // 8)
    for a in (a1, a2):
        a.lim["x"] = (-0.6, len(ok) - 0.4)
        a.ticks["x"] = [(i, names[i][-9:]) for i in range(0, len(ok), step)]
        a.tick_size["x"], a.rotate = svg.SMALL, 30
    chains = sum(s.chains for s in ok if s.chains is not None)
    used = np.flatnonzero(chains)
    last = int(used.max()) if used.size else 1
    xlabel = f"entries in a slot's chain ({K.CHAIN_MAX}+ in the last bar)" if last == K.CHAIN_MAX else "entries in a slot's chain"
    a3 = svg.Axes("Chain length histogram (all files)", xlabel, "slots", y=svg.LOG)
    a3.bars(np.arange(0, last + 1), chains[: last + 1], 0.8, "#9467bd")
    a3.lim["x"] = (-0.6, last + 0.6)
    return svg.figure([a1, a2, a3], 2.8 * INCH, cols=3)


def due_plot(due_times: list[int]) -> str | None:
    """Delayed messages waiting, by the time they fall due (UTC)."""
    due_times = [t for t in due_times if svg.TIME_RANGE[0] <= t <= svg.TIME_RANGE[1]]  # a time a date can spell (the list shows every one)
    if not due_times:
        return None
    counts, edges = np.histogram(np.asarray(due_times, dtype=np.float64), bins=min(60, max(5, len(due_times))))
    ax = svg.Axes(f"Delayed messages waiting: {len(due_times)}, by due time", "due (UTC)", "messages", x=svg.TIME)
    for c, a, b in zip(counts, edges[:-1], edges[1:], strict=True):
        ax.rect(a, b, 0, c, "#1f77b4")
    ax.lim["x"] = (edges[0], edges[-1])
    return svg.figure([ax], 2.2 * INCH)
