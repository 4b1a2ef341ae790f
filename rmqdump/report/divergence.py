"""The report's divergence section (`rmqdump report -s A --diff B`): two stores that were one, side by side.

The numbers are rmqdump.checks.diff's (the common prefix, the messages only on each side, per queue the divergent
offsets, what consumers at their committed offsets skip or read twice); the page shows counts, the first
SAMPLES messages of each kind and a timeline of both sides' messages past the prefix, binned by store time
(never one mark per message), so the page stays small whatever the size of the divergence.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np

from rmqdump.checks.diff import SIDES, ConsumerImpact, QueueDiff, diff_stores
from rmqdump.common.timeutil import iso
from rmqdump.readers.store import Store
from rmqdump.report import plots, svg
from rmqdump.scan.ranges import SERIAL, Mapper

SAMPLES = 20  # messages listed per side and kind; the rest are counted
TIMELINE_BINS = 120
_STATUS_COLORS = {"only": ("#d62728", "#1f77b4"), "moved": ("#ff7f0e", "#ff7f0e"), "same": ("#2ca02c", "#2ca02c")}  # A's, B's


@dataclass
class Divergence:
    a_root: str
    b_root: str
    prefix: dict  # the `prefix` JSON Lines object of rmqdump diff
    summary: dict  # its `summary` object
    queues: list[QueueDiff]
    consumers: list[ConsumerImpact]
    samples: dict[str, list[dict]]  # per side: the first SAMPLES `message` objects only on that side
    edges: np.ndarray  # timeline bin edges (store time, ms)
    counts: dict[str, dict[str, np.ndarray]]  # per side per status: messages per bin
    problems: dict[str, int] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return bool(self.prefix["identical"])


def collect_divergence(a: Store, b: Store, *, check_crc: bool = True, mapper: Mapper = SERIAL, temp_dir: str | None = None) -> Divergence:
    """Compare the two stores and keep what the page shows (the records past the prefix stay on disk meanwhile)."""
    with diff_stores(a, b, check_crc=check_crc, mapper=mapper, temp_dir=temp_dir) as d:
        samples = {s: list(d.messages(s, "only", limit=SAMPLES)) for s in SIDES}
        edges, counts = d.timeline(TIMELINE_BINS)
        return Divergence(a.root, b.root, d.prefix_dict(), d.summary(), d.queues, d.consumers, samples, edges, counts, {s: len(d.problems[s]) for s in SIDES})


def _e(v) -> str:
    return html.escape("" if v is None else str(v))


def _runs(ranges: list[list[int]], most: int = 6) -> str:
    text = ", ".join(f"{a}" if b == a + 1 else f"{a}..{b - 1}" for a, b in ranges[:most])
    return text + (f" (+{len(ranges) - most} runs)" if len(ranges) > most else "")


def timeline_plot(div: Divergence) -> str | None:
    """Both sides' messages past the common prefix per store-time bin, stacked by what the other side holds."""
    if not len(div.edges) or not any(c.sum() for s in SIDES for c in div.counts[s].values()):
        return None
    x = div.edges[:-1].astype(float)
    width = float(div.edges[1] - div.edges[0])
    axes = []
    for s, name in zip(SIDES, ("A", "B"), strict=True):
        ax = svg.Axes(ylabel=f"{name}: messages", x=svg.TIME)
        bottom = np.zeros(len(x))
        for status, label in (("only", f"only on {name}"), ("moved", "on both, other offset"), ("same", "on both, same offset")):
            c = div.counts[s][status].astype(float)
            if c.sum():
                ax.bars(x + width / 2, c, width, _STATUS_COLORS[status][SIDES.index(s)], f"{label} ({int(c.sum())})", bottom)
                bottom += c
        ax.lim["x"] = (float(div.edges[0]), float(div.edges[-1]))
        axes.append(ax)
    axes[0].title, axes[0].xtick_labels = "Messages past the common prefix on each side, by store time", False
    axes[1].xlabel = "store time (UTC)"
    return svg.figure(axes, 3.6 * plots.INCH)


def section(div: Divergence, table) -> str:
    """The section's HTML; `table` is the page's table helper (rmqdump.report.page._table)."""
    p, s = div.prefix, div.summary
    if div.identical:
        return f'<p class="ok">Identical: A ({_e(div.a_root)}) and B ({_e(div.b_root)}) hold the same CommitLog bytes on [{p["start"]}, {p["identical_up_to"]}).</p>'
    who = {"a": "A is a byte prefix of B", "b": "B is a byte prefix of A"}.get(p["prefix_of"], "both sides went on past it")
    out = (
        f"<dl><dt>A</dt><dd><code>{_e(div.a_root)}</code></dd><dt>B</dt><dd><code>{_e(div.b_root)}</code></dd>"
        f'<dt>identical up to</dt><dd id="div-identical-up-to">{p["identical_up_to"]}</dd>'
        f'<dt>first differing byte</dt><dd id="div-first-differing-byte">{p["first_differing_byte"]}</dd>'
        f"<dt>then</dt><dd>{_e(who)}</dd>"
        f"<dt>data end</dt><dd>A {p['a_data_end']}, B {p['b_data_end']}</dd>"
        f"<dt>past the prefix</dt><dd>A {s['a_messages_past_prefix']} messages, B {s['b_messages_past_prefix']}; "
        f'only on A <b id="div-only-a">{s["only_a"]}</b>, only on B <b id="div-only-b">{s["only_b"]}</b>, '
        f"on both at another offset {s['moved']}, at the same offset {s['same_offset']}</dd>"
        f'<dt>divergent queue offsets</dt><dd id="div-offsets">{s["divergent_offsets"]} in {s["queues_divergent"]} queues</dd></dl>'
    )
    out += plots.placed(timeline_plot(div), "")
    for side, name in zip(SIDES, ("A", "B"), strict=True):
        total = s[f"only_{side}"]
        out += f'<h3>Only on {name} ({total})</h3><div class="scroll" id="div-only-{side}-samples">' + table(
            ["phys offset", "topic", "queue", "queue offset", "UNIQ_KEY", "keys", "tags", "stored (UTC)"],
            (
                [m["phys_offset"], m["topic"], m["queue_id"], m["queue_offset"], m["uniq_key"], " ".join(m["keys"]), m["tags"], iso(m["store_timestamp"])]
                for m in div.samples[side]
            ),
            numeric={0, 2, 3},
            total=total,
            keep={4, 7},
        )
        out += "</div>"
    rows = [q for q in div.queues if q.differs()]
    out += (
        f"<h3>Queues that differ ({len(rows)})</h3>"
        + '<div class="scroll" id="div-queues">'
        + table(
            ["topic", "queue", "A max", "B max", "divergent", "divergent offsets", "only on A", "only on B"],
            (
                [q.topic, q.queue_id, q.a_max_offset, q.b_max_offset, q.divergent_count, _runs(q.divergent_ranges), _runs(q.only_a), _runs(q.only_b)]
                for q in rows
            ),
            numeric={1, 2, 3, 4},
        )
    )
    out += "</div>"
    if div.consumers:
        out += '<h3>Consumers moving to the other side</h3><div class="scroll" id="div-consumers">' + table(
            ["committed on", "group", "topic", "queue", "offset", "other side's max", "skips", "skipped offsets", "reads twice", "read-twice offsets"],
            (
                [
                    c.side.upper(),
                    c.group,
                    c.topic,
                    c.queue_id,
                    c.committed,
                    c.other_max_offset,
                    d["skipped"],
                    _runs(c.skipped),
                    d["read_twice"],
                    _runs(c.read_twice),
                ]
                for c in div.consumers
                for d in [c.to_dict()]
            ),
            numeric={3, 4, 5, 6, 8},
        )
        out += "</div>"
    return out
