"""A report over a fleet: one page with a summary row per broker (linked to its section), fleet-wide plots, then each
broker's sections as its own page shows them. Still one self-contained file: inline CSS and SVG, no script."""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from rmqdump.report import collect as K
from rmqdump.report import page as P
from rmqdump.report import plots, svg

SUMMARY_COLUMNS = ["broker", "state", "CommitLog offsets", "messages", "queues", "units", "problems", "restart drops", "consumer lag"]


def anchor(i: int) -> str:
    """The id of the i-th broker's section (names may hold any character; positions are safe in a URL fragment)."""
    return f"broker-{i}"


def lag_total(rep: K.Report) -> int:
    return 0 if rep.offsets is None else sum(r.lag for r in rep.offsets.rows if r.lag is not None and r.lag > 0)


def drops(rep: K.Report) -> int | None:
    r = rep.info.recovery
    return None if r is None else r.truncated_messages


def summary_row(rep: K.Report) -> list:
    """One broker's numbers: what the broker's own section shows in detail."""
    inf, cl = rep.info, rep.info.commitlog
    return [
        "abort: unclean" if inf.abort else "clean",
        f"{cl.min_offset}..{cl.data_end}",
        rep.verify.messages,
        rep.verify.queues,
        rep.verify.units,
        rep.problem_total,
        "-" if drops(rep) is None else drops(rep),
        lag_total(rep),
    ]


def _summary(brokers: list[tuple[str, K.Report]]) -> str:
    out = ["<table><tr>", *(f"<th>{P._e(c)}</th>" for c in SUMMARY_COLUMNS), "</tr>"]
    numeric = {3, 4, 5, 6, 7, 8}
    for i, (name, rep) in enumerate(brokers):
        cells = [f'<td><a href="#{anchor(i)}">{P._e(name)}</a></td>']
        cells += [f'<td class="n">{P._e(v)}</td>' if k in numeric else f'<td class="k">{P._e(v)}</td>' for k, v in enumerate(summary_row(rep), start=1)]
        cls = ' class="bad"' if rep.bad else ""
        out.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    reps = [r for _, r in brokers]
    total = [
        f"total ({len(reps)} brokers)",
        f"{sum(r.info.abort for r in reps)} unclean",
        "",
        sum(r.verify.messages for r in reps),
        sum(r.verify.queues for r in reps),
        sum(r.verify.units for r in reps),
        sum(r.problem_total for r in reps),
        sum(drops(r) or 0 for r in reps),
        sum(lag_total(r) for r in reps),
    ]
    out.append(
        '<tr class="total">' + "".join(f'<th class="n">{P._e(v)}</th>' if k in numeric else f"<th>{P._e(v)}</th>" for k, v in enumerate(total)) + "</tr>"
    )
    out.append("</table>")
    return "".join(out)


def rate_plot(brokers: list[tuple[str, K.Report]]) -> str | None:
    """Each broker's message rate (all topics) over store time, one line per broker."""
    lines = [(n, r.traffic.rate) for n, r in brokers if r.traffic.rate.t0 is not None and r.traffic.rate.counts.size]
    if not lines:
        return None
    ax = svg.Axes("Message rate per broker over store time", "store time (UTC)", "messages / s", x=svg.TIME)
    for j, (name, rate) in enumerate(lines):
        y = rate.per_second().sum(axis=0)
        x = rate.t0 + np.arange(rate.bins + 1) * rate.width
        ax.step(x, np.append(y, y[-1]), plots._COLORS[j % len(plots._COLORS)], f"{plots._short(name)} ({int(rate.counts.sum())})")
    return svg.figure([ax], 3.2 * plots.INCH)


def damage_plot(brokers: list[tuple[str, K.Report]]) -> str | None:
    """Problems found per broker, with the messages a restart would drop inside each bar."""
    if not any(r.problem_total or drops(r) for _, r in brokers):
        return None
    rows = [(n, r.problem_total, drops(r) or 0) for n, r in brokers]
    legend = ("problems found", "messages a restart drops")
    return plots.hbars(rows, itemgetter(1), itemgetter(2), _name, legend, ("#fcbba1", "#b00020"), "count", "Damage per broker", 0.25, 0.9)


def lag_plot(brokers: list[tuple[str, K.Report]]) -> str | None:
    """Each broker's summed consumer lag, with its number of lagging queues inside."""
    rows = [(n, lag_total(r), 0 if r.offsets is None else sum(1 for x in r.offsets.rows if x.lag)) for n, r in brokers]
    if not any(t for _, t, _ in rows):
        return None
    legend = ("messages behind (sum of lag)", "lagging queues")
    return plots.hbars(rows, itemgetter(1), itemgetter(2), _name, legend, ("#fdd0a2", "#e6550d"), "messages", "Consumer lag per broker", 0.25, 0.9)


def _name(row: tuple) -> str:
    return plots._short(row[0], 40)


def render(brokers: list[tuple[str, K.Report]], errors: list[tuple[str, str]] = ()) -> str:
    """The fleet page: summary table and plots, then every broker's sections (h3 under the broker's h2)."""
    body = ["<h2>Fleet</h2>", _summary(brokers)]
    for name, why in errors:
        body.append(f'<p class="bad">{P._e(name)}: not read: {P._e(why)}</p>')
    body.append(P._plot(rate_plot(brokers), "No messages in any CommitLog."))
    body.append(P._plot(damage_plot(brokers), "No problems found and no restart would drop a message."))
    body.append(P._plot(lag_plot(brokers), "No consumer lags (or no consumerOffset.json)."))
    for i, (name, rep) in enumerate(brokers):
        body.append(f'<section id="{anchor(i)}"><h2>Broker {P._e(name)}</h2>')
        body += [f"<h3>{P._e(h)}</h3>{s}" for h, s in P.sections(rep)]
        body.append("</section>")
    return P.document(f"rmqdump report: a fleet of {len(brokers)} brokers", "".join(body))
