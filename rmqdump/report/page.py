"""The report as one self-contained HTML page: inline CSS, inline SVG plots, tables; no script, no link, no request."""

from __future__ import annotations

import html
import os
import shlex
from collections.abc import Iterable

from rmqdump import __version__
from rmqdump.common.timeutil import iso
from rmqdump.report import collect as K
from rmqdump.report import plots, svg

MAX_TABLE_ROWS = 500  # rows of a per-queue or per-offset table; the rest are counted

_CSS = f"""
body{{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1120px;color:#1a1a1a;background:#fff}}
h1{{font-size:22px;margin:0 0 4px}} h3{{font-size:14px;margin:16px 0 4px}} h4{{font-size:13px;margin:14px 0 4px}} h2{{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}}
.sub{{color:#555}} .bad{{color:#b00020;font-weight:600}} .ok{{color:#1b7f3b;font-weight:600}}
table{{border-collapse:collapse;font-size:12px;margin:6px 0}} td,th{{border-bottom:1px solid #eceff3;padding:2px 8px;text-align:left;vertical-align:top}}
th{{background:#f7f8fa}} td.n{{text-align:right;font-variant-numeric:tabular-nums}}
.plot{{background:{plots.PLOT_BG};margin:10px 0;padding:6px 12px;line-height:0}} .plot svg{{max-width:100%;height:auto}}
.scroll{{max-height:420px;overflow:auto;border:1px solid #eceff3}}
dl{{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:6px 0}} dt{{color:#555}} dd{{margin:0}}
code{{font-size:12px}} td{{overflow-wrap:break-word}} td.n,td.k{{white-space:nowrap}} td.w{{overflow-wrap:anywhere;min-width:12em}}
"""


def _e(v) -> str:
    return html.escape("" if v is None else str(v))


def _rel(rep: K.Report, path: str | None) -> str:
    """A store file's path from the store root (the page names the root once)."""
    if not path:
        return ""
    rel = os.path.relpath(path, rep.info.root)
    return path if rel.startswith("..") else rel


def _table(
    columns: list[str],
    rows: Iterable[list],
    numeric: set[int] = frozenset(),
    total: int | None = None,
    keep: set[int] = frozenset(),
    wrap: set[int] = frozenset(),
) -> str:
    """An HTML table; `numeric` columns align right, `keep` columns (codes, times) do not wrap, `wrap` ones (paths) wrap anywhere."""
    out = ["<table><tr>", *(f"<th>{_e(c)}</th>" for c in columns), "</tr>"]
    n = 0
    for r in rows:
        n += 1
        out.append(
            "<tr>"
            + "".join(
                f'<td class="n">{_e(v)}</td>'
                if i in numeric
                else f'<td class="k">{_e(v)}</td>'
                if i in keep
                else f'<td class="w">{_e(v)}</td>'
                if i in wrap
                else f"<td>{_e(v)}</td>"
                for i, v in enumerate(r)
            )
            + "</tr>"
        )
    out.append("</table>")
    if total is not None and total > n:
        out.append(f'<p class="sub">… and {total - n} more not listed.</p>')
    return "".join(out)


def _plot(svg, empty: str) -> str:
    return plots.placed(svg, f'<p class="sub">{_e(empty)}</p>')


def _summary(rep: K.Report) -> str:
    inf = rep.info
    cl = inf.commitlog
    ck = inf.checkpoint
    state = '<span class="bad">abort present: unclean shutdown</span>' if inf.abort else "clean shutdown (no abort file)"
    verdict = f'<span class="bad">{_e("; ".join(rep.causes))}</span>' if rep.problem_total else '<span class="ok">no problems found by cq verify</span>'
    items = [
        ("store", _e(inf.root)),
        ("state", f"{state}; lock file: {'yes' if inf.lock else 'no'}"),
        ("verdict", verdict + f" ({rep.verify.queues} queues, {rep.verify.units} units, {rep.verify.messages} messages checked)"),
        ("CommitLog", _e(cl.summary())),
        (
            "checkpoint",
            _e(
                f"physic {iso(ck.physic_msg_timestamp)}, logics {iso(ck.logics_msg_timestamp)}, index {iso(ck.index_msg_timestamp)} "
                f"(recovery bound {iso(ck.min_timestamp)})"
            )
            if ck is not None
            else '<span class="bad">missing</span>',
        ),
        ("ConsumeQueues", _e(f"{len(inf.queues)} queues, {sum(q.units for q in inf.queues)} units" + ("" if inf.cq_file_size is None else f", file size {inf.cq_file_size}"))),
        ("index files", _e(f"{len(inf.index_files)}")),
        ("CRC", "checked" if rep.check_crc else "not checked (--no-crc)"),
    ]
    if inf.configs:
        items.append(
            ("config files", _e(", ".join(f"{os.path.basename(c.path)} ({c.size} bytes){'' if c.error is None else ' ' + c.error}" for c in inf.configs)))
        )
    for u in inf.unsupported:
        items.append(("not decoded", _e(f"{u.kind} at {u.path}: {u.detail}")))
    for n in inf.notes:
        items.append(("note", _e(n)))
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _recovery(rep: K.Report) -> str:
    r = rep.info.recovery
    if r is None:
        return '<p class="sub">No recovery preview.</p>'
    lines = [
        f"{'<b>ABNORMAL</b>' if r.abnormal else 'normal'} recovery (rules: {_e(r.rules)}, {_e(r.rules_why)}): scan from {r.scan_from} (file {_e(r.scan_from_file)}), stops at {r.valid_end}: {_e(r.stop)}",
        (f'<span class="{"bad" if r.truncated_bytes else "ok"}">dropped on restart: {r.truncated_bytes} bytes, {r.truncated_messages} messages</span>')
        + f" after {r.valid_end} (logical truncation; the bytes stay on disk)",
        f"CommitLog files deleted: {_e(', '.join(r.commitlog_files_dropped) or 'none')}",
        f"re-dispatch into ConsumeQueues from {r.redispatch_from}; index rebuilt from {r.index_redispatch_from}",
        f"index files deleted on load: {_e(', '.join(r.index_files_dropped) or 'none')}",
    ]
    lines += [f'<span class="bad">the broker would refuse to load</span>: {_e(e)}' for e in r.load_errors]
    if any(d.state == "intact" for d in r.dropped):  # what `rmqdump salvage` and `rmqdump repair` give back
        root = shlex.quote(rep.info.root)
        lines.append(
            f"give the intact ones back before restarting: <code>{_e(f'rmqdump salvage {root} --out DIR')}</code> writes them as data to send again; "
            f"<code>{_e(f'rmqdump repair {root} --out NEWDIR')}</code> writes a copy the broker restarts from keeping them"
        )
    out = "<ul>" + "".join(f"<li>{x}</li>" for x in lines) + "</ul>"
    if rep.dropped:
        out += f"<p>The records a restart would drop (first {len(rep.dropped)} of {r.truncated_messages}; what of each still decodes):</p>"
        out += _table(
            ["phys offset", "size", "state", "topic", "queue", "queue offset", "stored (UTC)", "UNIQ_KEY", "KEYS"],
            (
                [d.phys_offset, d.total_size, d.state, d.topic, d.queue_id, d.queue_offset, iso(d.store_timestamp), d.uniq_key, " ".join(d.keys or [])]
                for d in rep.dropped
            ),
            numeric={0, 1, 4, 5},
            keep={2, 6},
            wrap={3},
        )
    return out


def _traffic(rep: K.Report) -> str:
    t = rep.traffic
    out = _plot(plots.rate_plot(t), "No messages in the CommitLog.")
    if t.rate.unplotted:
        lo, hi = (iso(v) for v in svg.TIME_RANGE)
        out += f'<p class="sub">{t.rate.unplotted:,} records with a store time outside {lo} .. {hi} are not in the rate plot.</p>'
    out += _plot(plots.latency_plot(t), "No messages: no latency to show.")
    names = sorted(t.latency, key=lambda n: -int(t.latency[n].sum()))
    if names:

        def q(n, p):
            v = t.latency_quantile(n, p)
            return "" if v is None else "< 0 ms" if v < 0 else f"≤ {K._ms(v)}"

        out += _table(
            ["topic", "messages", "latency p50", "latency p99", "max bucket"],
            ([n, int(t.latency[n].sum()), q(n, 0.5), q(n, 0.99), K.latency_label(int(t.latency[n].nonzero()[0].max()))] for n in names[:MAX_TABLE_ROWS]),
            numeric={1},
            total=len(names),
        )
    return out


def _queues(rep: K.Report) -> str:
    inf = rep.info
    out = _plot(plots.queues_plot(inf), "No ConsumeQueues.")
    out += '<div class="scroll">' + _table(
        ["topic", "queue", "files", "min", "max", "units", "first stored (UTC)", "last stored (UTC)"],
        (
            [q.topic, q.queue_id, q.files, q.min_offset, q.max_offset, q.units, iso(q.first_store_timestamp), iso(q.last_store_timestamp)]
            for q in inf.queues[:MAX_TABLE_ROWS]
        ),
        numeric={1, 2, 3, 4, 5},
        total=len(inf.queues),
        keep={6, 7},
    )
    out += "</div>"
    if rep.offsets is None:
        out += f'<p class="sub">Consumer offsets: {_e(rep.offsets_note)}</p>'
        return out
    out += _plot(plots.lag_plot(rep.offsets), "No committed offsets with a queue to compare against.")
    rows = rep.offsets.rows
    out += '<div class="scroll">' + _table(
        ["group", "topic", "queue", "committed", "bak", "min", "max", "lag", "flags"],
        ([r.group, r.topic, r.queue_id, r.committed, r.bak, r.min_offset, r.max_offset, r.lag, ",".join(r.flags)] for r in rows[:MAX_TABLE_ROWS]),
        numeric={2, 3, 4, 5, 6, 7},
        total=len(rows),
    )
    return out + "</div>"


def _damage(rep: K.Report) -> str:
    return _plot(plots.damage_plot(rep.damage, rep.info), "")


def _index(rep: K.Report) -> str:
    out = _plot(plots.index_plot(rep.index), "No readable index files.")
    out += _table(
        ["file", "size", "begin (UTC)", "end (UTC)", "slots", "slots used", "entries", "keys", "fill", "error"],
        (
            [
                s.name,
                s.size,
                iso(s.begin_timestamp),
                iso(s.end_timestamp),
                s.hash_slots,
                s.used_slots,
                s.index_entries,
                s.keys,
                "" if s.fill is None else f"{100 * s.fill:.1f}%",
                s.error or "",
            ]
            for s in rep.index[:MAX_TABLE_ROWS]
        ),
        numeric={1, 4, 5, 6, 7},
        total=len(rep.index),
        keep={0, 2, 3},
    )
    return out


def _problems(rep: K.Report) -> str:
    if not rep.problem_total:
        return '<p class="ok">No problems found.</p>'
    codes = ", ".join(f"{k} {v}" for k, v in sorted(rep.problem_codes.items()))
    out = f"<p>{rep.problem_total} findings ({_e(codes)}) in {rep.run_total} lines: a run of one code in one queue is one line, the damage first"
    out += f"; the first {len(rep.runs)}:</p>" if rep.run_total > len(rep.runs) else ":</p>"
    out += '<div class="scroll">' + _table(
        ["code", "topic", "queue", "queue offsets", "count", "phys offsets", "file", "detail"],
        ([r.code, r.topic, r.queue_id, r.units, r.count, r.phys, _rel(rep, r.file), r.text] for r in rep.runs),
        numeric={2, 3, 4, 5},
        total=rep.run_total,
        keep={0},
        wrap={1, 6},
    )
    return out + "</div>"


def _lifecycle(rep: K.Report) -> str:
    lc = rep.lifecycle
    s = lc.summary
    out = [
        f'<p>{s["delays_waiting"]} delayed messages waiting, {s["timer_waiting"]} timer messages waiting, '
        f'{s["transactions_pending"]} transactions pending and {s["transactions_discarded"]} discarded, '
        f'{s["dead_letter_messages"]} messages in dead-letter queues, {s["pops_unacked"]} popped messages never acked. '
        f"<code>rmqdump journey ID</code> tells one message's story; <code>rmqdump delay</code>, <code>tx</code> and "
        f"<code>pop</code> list them all.</p>",
        _plot(plots.due_plot(lc.due_times), "No delayed message is waiting."),
    ]
    if lc.delays:
        out.append("<h4>Delayed messages waiting</h4>")
        out.append(_table(["due (UTC)", "level", "goes to", "queue", "uniq key", "phys offset"],
                          ([iso(r["due_time"]), r["level"], r["real_topic"], r["real_queue_id"], r["uniq_key"], r["phys_offset"]] for r in lc.delays),
                          numeric={1, 3, 5}, total=len(lc.due_times), keep={0, 4}))  # fmt: skip
    if lc.transactions:
        out.append("<h4>Transactions hanging or discarded</h4>")
        out.append(_table(["state", "broker checks", "topic", "producer group", "uniq key", "latest half"],
                          ([r["state"], r["checks"], r["topic"], r["producer_group"], r["uniq_key"], r["half_offsets"][-1]] for r in lc.transactions),
                          numeric={1, 5}, total=lc.transactions_total, keep={0, 4}))  # fmt: skip
    if lc.dead_letters:
        out.append("<h4>Dead-letter queues</h4>")
        out.append(_table(["group", "messages", "dead-lettered journeys found"], ([g, n, k] for g, n, k in lc.dead_letters), numeric={1, 2}))
    if lc.unacked:
        out.append("<h4>Popped messages never acked</h4>")
        out.append(_table(["group", "topic", "queue", "offset", "invisible until (UTC)", "uniq key"],
                          ([r["group"], r["topic"], r["queue_id"], r["queue_offset"], iso(r["invisible_until"]), r["uniq_key"]] for r in lc.unacked),
                          numeric={2, 3}, total=lc.unacked_total, keep={4, 5}))  # fmt: skip
    return "".join(out)


def sections(rep: K.Report) -> list[tuple[str, str]]:
    """One store's sections (heading, HTML), as its own page shows them and a fleet page repeats them per broker."""
    return [
        ("Summary", _summary(rep)),
        ("Recovery preview: what a restart would do", _recovery(rep)),
        ("Traffic", _traffic(rep)),
        ("Queues and consumer groups", _queues(rep)),
        ("Damage map", _damage(rep)),
        ("Index files", _index(rep)),
        ("Problems", _problems(rep)),
    ] + ([("Message lifecycle", _lifecycle(rep))] if rep.lifecycle is not None else [])


def document(title: str, body: str) -> str:
    """The page around a body: inline style, the title, the version line."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{_e(title)}</h1><p class="sub">rmqdump {_e(__version__)}: offline, read-only analysis; all times UTC.</p>'
        f"{body}</body></html>\n"
    )


def render(rep: K.Report, divergence=None) -> str:
    """The whole page as one string; with `divergence` (rmqdump.report.divergence.Divergence) its section second."""
    parts = sections(rep)
    if divergence is not None:
        from rmqdump.report.divergence import section

        parts.insert(1, (f"Divergence from {divergence.b_root}", section(divergence, _table)))
    return document(f"rmqdump report: {rep.info.root}", "".join(f"<h2>{_e(h)}</h2>{s}" for h, s in parts))
