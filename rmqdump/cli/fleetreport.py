"""`report` over a fleet: every store collected side by side (one thread per store), one page written."""

from __future__ import annotations

from rmqdump.cli import render
from rmqdump.cli.fleet import fleet_map


def fleet_report(refs, out: str, *, force: bool, limit: int, check_crc: bool) -> int:
    """Write the fleet page; 1 when a broker has problems, would drop data on restart, or cannot be read."""
    from rmqdump.common.problems import InputError
    from rmqdump.common.publish import check_target, publishing
    from rmqdump.readers.store import Store
    from rmqdump.report.collect import collect, collect_bytes
    from rmqdump.report.fleetpage import render as render_page

    roots = [r.root for r in refs]
    check_target(out, force=force, stores=roots, kind="file")  # before the long part: fail fast
    stores: dict[str, Store | InputError] = {}
    for ref in refs:
        try:
            stores[ref.name] = Store.open(ref.root)
        except InputError as e:
            stores[ref.name] = e
    total = sum(collect_bytes(s) for s in stores.values() if isinstance(s, Store))
    with render.progress(total, "report") as advance:  # on a terminal only

        def one(ref):
            st = stores[ref.name]
            if isinstance(st, InputError):
                return st
            try:
                return collect(st, check_crc=check_crc, limit=limit, on_bytes=advance)
            except InputError as e:
                return e

        got = list(fleet_map(refs)(one, refs))
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
