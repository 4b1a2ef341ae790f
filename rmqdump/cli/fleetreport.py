"""`report` over a fleet: the stores collected one after the other, each on every core (the local map over its
ranges, or the caller's mapper such as Spark's tasks; collecting stores in threads side by side would share the
ConsumeQueue read cache, which is one per process), one page written."""

from __future__ import annotations

from rmqdump.cli import render


def fleet_report(
    refs,
    out: str,
    *,
    force: bool,
    limit: int,
    check_crc: bool,
    workers: int | None = None,
    broker_version: tuple[int, ...] | None = None,
    mapper=None,
) -> int:
    """Write the fleet page; 1 when a broker has problems, would drop data on restart, or cannot be read.

    mapper: what maps every store's CommitLog ranges (--engine spark's tasks); default the local engine, sized per store."""
    from rmqdump.common.problems import InputError
    from rmqdump.common.publish import check_target, publishing
    from rmqdump.engines.local import local_map
    from rmqdump.readers.store import Store
    from rmqdump.report.collect import collect, collect_bytes
    from rmqdump.report.fleetpage import render as render_page

    roots = [r.root for r in refs]
    check_target(out, force=force, stores=roots, kind="file")  # before the long part: fail fast
    stores: dict[str, Store | InputError] = {}
    for ref in refs:
        try:
            stores[ref.name] = Store.open(ref.root, broker_version)
        except InputError as e:
            stores[ref.name] = e
    total = sum(collect_bytes(s) for s in stores.values() if isinstance(s, Store))
    with render.progress(total, "report") as advance:  # on a terminal only

        def one(ref):
            st = stores[ref.name]
            if isinstance(st, InputError):
                return st
            try:
                ranges = mapper if mapper is not None else local_map(workers, sum(f.size for f in st.commitlog.files))
                return collect(st, check_crc=check_crc, limit=limit, mapper=ranges, on_bytes=advance)
            except InputError as e:
                return e

        got = [one(ref) for ref in refs]
    brokers = [(ref.name, r) for ref, r in zip(refs, got, strict=True) if not isinstance(r, InputError)]
    errors = [(ref.name, r.line()) for ref, r in zip(refs, got, strict=True) if isinstance(r, InputError)]
    page = render_page(brokers, errors)
    with publishing(out, force=force, stores=roots, kind="file") as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    for name, why in errors:
        render.err.print(f"{name}: {why}", highlight=False, markup=False)
    messages = sum(r.verify.messages for _, r in brokers)
    problems = sum(r.problem_total for _, r in brokers)
    render.err.print(f"wrote {out}: {len(brokers)} brokers, {messages} messages, {problems} problems", highlight=False, markup=False)
    return 1 if errors or any(r.bad for _, r in brokers) else 0
