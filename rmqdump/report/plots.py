"""The report's plots: matplotlib figures rendered to inline SVG (no JavaScript, nothing to load).

Why matplotlib to SVG: the page must open offline and fast in any browser attached to a ticket. An SVG of
aggregated bins is a few tens of KB and draws at once; plotly would inline about 3.5 MB of JavaScript per page
and run it before anything shows. Every plot here is of bins or top-N lists, never one mark per message.
"""

from __future__ import annotations

import functools
import io
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

import numpy as np

from rmqdump.report import collect as K

PLOT_BG = "#eef2f8"  # the figures' background: the page frames plots with it (and the browser test finds them by it)
TOP_TOPICS = 8
TOP_BARS = 40
WIDTH_IN = 11.0
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


_COST = {"index_plot": 3, "rate_plot": 2}  # a plot's drawing time against the others' (cProfile at 1M: 1.1 s, 0.9 s, the rest <= 0.4 s)
_RC = {"svg.fonttype": "none", "svg.hashsalt": "rmqdump", "font.size": 9, "axes.titlesize": 10}  # text as text; ids stable run to run


PRELOAD = ("rmqdump.report.fleetpage", "rmqdump.report.divergence", "matplotlib.figure", "matplotlib.backends.backend_svg")  # what a drawing process imports once


class Drawing:
    """The plots of a page being built: queued as the page's text is written (cheap), drawn together at the end
    (dear: matplotlib), side by side on a mapper's workers, each put back where the page placed it."""

    def __init__(self):
        self.jobs: list[tuple] = []  # (plot function, args, kwargs)
        self.places: list[tuple[int, str]] = []  # (job, the HTML when it draws nothing)
        self.nonce = secrets.token_hex(8)  # in every token: no text of the store can forge one

    def fill(self, html: str, mapper=None) -> str:
        """`html` with every placed plot drawn (by `mapper`, e.g. rmqdump.engines.local.ProcessMap; else here), the
        dearest first: a worker that takes the index plot last would finish the page alone."""
        order = sorted(range(len(self.jobs)), key=lambda i: -_COST.get(self.jobs[i][0].__name__, 1))
        drawn: list = [None] * len(self.jobs)
        for i, svg in zip(order, (mapper or map)(_draw, [self.jobs[i] for i in order]), strict=True):
            drawn[i] = svg
        return re.sub(f"\x00{self.nonce}:(\\d+)\x00", lambda m: placed(drawn[self.places[int(m[1])][0]], self.places[int(m[1])][1]), html)


class Pending:
    """A queued plot: placed() puts a token for it in the page."""

    def __init__(self, drawing: Drawing, job: int):
        self.drawing, self.job = drawing, job


_DRAWING: Drawing | None = None  # set inside drawn_later(): plots called meanwhile are queued there


@contextmanager
def drawn_later() -> Iterator[Drawing]:
    """Queue the plots called inside; the caller then fills the page it built (Drawing.fill)."""
    global _DRAWING
    if _DRAWING is not None:
        raise RuntimeError("drawn_later() is not reentrant")
    _DRAWING = Drawing()
    try:
        yield _DRAWING
    finally:
        _DRAWING = None


def placed(svg: str | Pending | None, empty_html: str) -> str:
    """A plot's fragment: the SVG in its frame, or `empty_html` when there was nothing to draw (a token while queued)."""
    if isinstance(svg, Pending):
        d = svg.drawing
        d.places.append((svg.job, empty_html))
        return f"\x00{d.nonce}:{len(d.places) - 1}\x00"
    return f'<div class="plot">{svg}</div>' if svg else empty_html


def _draw(job) -> str | None:
    """One queued plot, drawn (in a drawing process, or here)."""
    fn, args, kwargs = job
    return fn(*args, **kwargs)


def _styled(fn):
    """Draw and save under the report's matplotlib settings, leaving the caller's rcParams alone (inside
    drawn_later(): queue the call and give back its Pending place instead)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _DRAWING is not None:
            _DRAWING.jobs.append((wrapper, args, kwargs))
            return Pending(_DRAWING, len(_DRAWING.jobs) - 1)
        import matplotlib

        with matplotlib.rc_context(_RC):
            return fn(*args, **kwargs)

    return wrapper


def _figure(height_in: float, ncols: int = 1):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, height_in), facecolor=PLOT_BG, layout="constrained")
    axes = fig.subplots(1, ncols)
    for ax in np.atleast_1d(axes):
        ax.set_facecolor("white")
    return fig, axes


def svg(fig) -> str:
    """The figure as an <svg> element to put inline (no XML prolog, no date)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", facecolor=fig.get_facecolor(), metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _short(name: str, n: int = 48) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def _utc(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def rate_axes(ax, xlabel: str, title: str) -> None:
    """The one look of a message rate over store time (per topic here, per broker on the fleet page)."""
    from matplotlib import dates as mdates

    ax.set_ylabel("messages / s")
    ax.set_xlabel(xlabel)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator(), tz=timezone.utc))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title(title)


@_styled
def rate_plot(traffic: K.Traffic) -> str | None:
    r = traffic.rate
    if r.t0 is None or not r.counts.size:
        return None
    names = r.topic_names()
    per_s = r.per_second()
    totals = r.counts.sum(axis=1)
    order = np.argsort(-totals, kind="stable")
    fig, ax = _figure(3.2)
    x = [_utc(r.t0 + i * r.width) for i in range(r.bins + 1)]
    shown = order[:TOP_TOPICS]
    for j, i in enumerate(shown):
        y = np.append(per_s[i], per_s[i][-1])
        ax.step(x, y, where="post", color=_COLORS[j % len(_COLORS)], lw=1.2, label=f"{_short(names[i])} ({int(totals[i])})")
    rest = order[TOP_TOPICS:]
    if len(rest):
        y = per_s[rest].sum(axis=0)
        ax.step(x, np.append(y, y[-1]), where="post", color="#555555", lw=1, ls="--", label=f"{len(rest)} other topics ({int(totals[rest].sum())})")
    rate_axes(ax, f"store time (UTC), bins of {K._ms(r.width)}", "Message rate per topic over store time")
    return svg(fig)


@_styled
def latency_plot(traffic: K.Traffic) -> str | None:
    if not traffic.latency:
        return None
    total = sum(traffic.latency.values())
    used = np.flatnonzero(total)
    lo, hi = int(used.min()), int(used.max())
    idx = np.arange(lo, hi + 1)
    fig, ax = _figure(2.8)
    names = sorted(traffic.latency, key=lambda t: -int(traffic.latency[t].sum()))
    bottom = np.zeros(len(idx))
    for j, t in enumerate(names[:TOP_TOPICS]):
        c = traffic.latency[t][idx].astype(float)
        ax.bar(np.arange(len(idx)), c, bottom=bottom, color=_COLORS[j % len(_COLORS)], label=_short(t), width=0.85)
        bottom += c
    if len(names) > TOP_TOPICS:
        c = sum(traffic.latency[t] for t in names[TOP_TOPICS:])[idx].astype(float)
        ax.bar(np.arange(len(idx)), c, bottom=bottom, color="#999999", label=f"{len(names) - TOP_TOPICS} other topics", width=0.85)
    ax.set_xticks(np.arange(len(idx)), [K.latency_label(int(i)) for i in idx], rotation=45 if len(idx) > 12 else 0, fontsize=7)
    ax.set_xlabel("born-to-store latency (bucket lower edge; each bucket doubles)")
    ax.set_ylabel("messages")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title("Born-to-store latency (storeTimestamp - bornTimestamp)")
    return svg(fig)


def _bars(rows: list, by: str, outer, inner, name, legend: tuple[str, str], colors: tuple[str, str], xlabel: str, title: str) -> str:
    """The TOP_BARS rows with the largest by(row), largest on top: a pale outer(row) bar with the darker inner(row) one inside."""
    rows = sorted(rows, key=lambda r: -getattr(r, by))
    top = rows[:TOP_BARS][::-1]
    fig, ax = _figure(max(1.6, 0.2 * len(top) + 0.8))
    y = np.arange(len(top))
    ax.barh(y, [outer(r) for r in top], color=colors[0], label=legend[0])
    ax.barh(y, [inner(r) for r in top], height=0.45, color=colors[1], label=legend[1])
    ax.set_yticks(y, [name(r) for r in top], fontsize=7)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    more = f" (top {TOP_BARS} of {len(rows)} by {by.replace('_', ' ')})" if len(rows) > TOP_BARS else ""
    ax.set_title(f"{title}{more}")
    return svg(fig)


@_styled
def queues_plot(info) -> str | None:
    qs = [q for q in info.queues if q.units or q.max_offset]
    if not qs:
        return None
    return _bars(
        qs,
        "max_offset",
        lambda q: q.max_offset,
        lambda q: q.units,
        lambda q: f"{_short(q.topic, 40)}/{q.queue_id}",
        ("max offset", "units on disk"),
        ("#c6dbef", "#1f77b4"),
        "queue offset",
        "ConsumeQueues: units and max offset",
    )


@_styled
def lag_plot(offsets) -> str | None:
    if offsets is None:
        return None
    rows = [r for r in offsets.rows if r.lag is not None]
    if not rows:
        return None
    return _bars(
        rows,
        "lag",
        lambda r: r.max_offset,
        lambda r: r.committed,
        lambda r: f"{_short(r.group, 24)} · {_short(r.topic, 24)}/{r.queue_id} (lag {r.lag})",
        ("queue max offset", "committed offset"),
        ("#fdd0a2", "#e6550d"),
        "queue offset (lag = max - committed)",
        "Consumer groups: committed offset and lag per queue",
    )


@_styled
def damage_plot(damage: K.DamageMap, info) -> str:
    from matplotlib.colors import LogNorm

    rows = K.DAMAGE_ROWS
    fig, ax = _figure(0.32 * len(rows) + 1.2)
    edges = damage.edges()
    for i, (key, _label) in enumerate(rows):
        c = damage.counts[key]
        nz = np.flatnonzero(c)
        if not nz.size:
            continue
        if key in K.SPAN_ROWS:
            colors = [
                (0.42, 0.56, 0.70, 0.25 + 0.75 * min(1.0, float(c[j]))) if key == K.UNWRITTEN else (0.84, 0.15, 0.16, 0.25 + 0.75 * min(1.0, float(c[j])))
                for j in nz
            ]
        else:
            norm = LogNorm(vmin=1, vmax=max(2, int(c.max())))
            cmap = _cmap()
            colors = [cmap(norm(max(1, int(c[j])))) for j in nz]
        ax.broken_barh([(edges[j], edges[j + 1] - edges[j]) for j in nz], (i - 0.4, 0.8), facecolors=colors)
    labels = []
    for key, label in rows:
        c = damage.counts[key]
        n = f"{damage.span_bytes.get(key, 0):,} bytes" if key in K.SPAN_ROWS else f"{int(c.sum()):,}"
        extra = damage.unplaced.get(key)
        labels.append(f"{label}: {n}" + (f" (+{extra} unplaced)" if extra else ""))
    ax.set_yticks(np.arange(len(rows)), labels, fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(damage.lo, damage.hi)
    cl = info.commitlog
    ax.axvline(cl.data_end, color="#333333", lw=0.8, ls=":")
    r = info.recovery
    if r is not None:
        ax.axvline(r.valid_end, color="#d62728", lw=1, ls="--")
        ax.text(r.valid_end, -0.45, "restart keeps up to here ", color="#d62728", fontsize=7, va="top", ha="right")
    ax.set_xlabel(f"CommitLog physical offset (bytes; {damage.bins} bins of {damage.width:,.0f} bytes)")
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("Damage map along the CommitLog (colour: findings per bin, log scale; spans: share of the bin covered)")
    return svg(fig)


def _plain_log_labels(axis) -> None:
    """A log axis labelled 1, 10, 100, 1,000 in plain text: matplotlib's default writes 10^k as mathtext, whose
    parser and fonts cost a drawing process about a second the first time."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _cmap():
    from matplotlib import colormaps

    return colormaps["YlOrRd"].resampled(64)


@_styled
def index_plot(stats: list[K.IndexStats]) -> str | None:
    ok = [s for s in stats if s.error is None]
    if not ok:
        return None
    fig, (a1, a2, a3) = _figure(2.8, 3)
    x = np.arange(len(ok))
    names = [s.name for s in ok]
    a1.bar(x - 0.2, [100 * (s.fill or 0) for s in ok], width=0.4, color="#1f77b4", label="entries used")
    a1.bar(x + 0.2, [100 * (s.slot_use or 0) for s in ok], width=0.4, color="#ff7f0e", label="slots used")
    a1.set_ylabel("% of capacity")
    a1.set_ylim(0, 105)
    a1.set_title("Fill and slot use")
    a1.legend(fontsize=7, loc="lower right")
    a2.bar(x, [s.keys for s in ok], color="#2ca02c")
    a2.set_title("Keys (entries) per file")
    for a in (a1, a2):
        step = max(1, len(ok) // 8)
        a.set_xticks(x[::step], [n[-9:] for n in names[::step]], fontsize=7, rotation=30)
        a.grid(axis="y", alpha=0.3)
    chains = sum(s.chains for s in ok if s.chains is not None)
    used = np.flatnonzero(chains)
    last = int(used.max()) if used.size else 1
    lens = np.arange(0, last + 1)
    a3.bar(lens, chains[: last + 1], color="#9467bd")
    a3.set_yscale("log")
    _plain_log_labels(a3.yaxis)
    a3.set_xlabel(f"entries in a slot's chain ({K.CHAIN_MAX}+ in the last bar)" if last == K.CHAIN_MAX else "entries in a slot's chain")
    a3.set_ylabel("slots")
    a3.set_title("Chain length histogram (all files)")
    a3.grid(axis="y", alpha=0.3)
    return svg(fig)


@_styled
def due_plot(due_times: list[int]) -> str | None:
    """Delayed messages waiting, by the time they fall due (UTC)."""
    if not due_times:
        return None
    fig, ax = _figure(2.2)
    ts = [_utc(t) for t in sorted(due_times)]
    ax.hist(ts, bins=min(60, max(5, len(ts))), color="#1f77b4")
    ax.set_ylabel("messages")
    ax.set_xlabel("due (UTC)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"Delayed messages waiting: {len(ts)}, by due time")
    fig.autofmt_xdate()
    return svg(fig)

