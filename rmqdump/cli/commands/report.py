"""`rmqdump report`: one self-contained HTML page for the incident ticket."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from rmqdump.cli import render
from rmqdump.cli.commands import options as O
from rmqdump.cli.commands.options import broker_version, broker_version_option, stores_option, workers_option
from rmqdump.cli.fleet import fleet


def report(
    store: list[str] = stores_option(
        "Store root (default: .). Repeat it, or give a glob such as 'brokers/*/store' (NAME=DIR names a broker): one page for the fleet, "
        "a summary row per broker linked to its section."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="The HTML file to write (written beside itself, then renamed into place; never inside the store)."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    limit: int = typer.Option(200, "--limit", "-n", min=0, help="Problems listed one by one on the page (the rest are counted)."),
    problems_out: Path | None = typer.Option(
        None, "--problems-out", help="Also write every finding to this file as JSON Lines (the `cq verify -f jsonl` objects), as they are found."
    ),
    no_crc: bool = typer.Option(False, "--no-crc", help="Skip body/property CRC checks (faster; CRC damage then goes unseen)."),
    workers: int = workers_option(),
    broker: str = broker_version_option(),
    diff: Path = typer.Option(
        None, "--diff", help="Another store that was one with this one (a master's slave after a failover): add the divergence section (see `rmqdump diff`)."
    ),
    engine: O.Engine = O.engine_option("each store's CommitLog ranges read by Spark tasks; the page folded on this machine"),
    master: str = O.master_option(),
    spark_conf: list[str] = O.spark_conf_option(),
    ship: O.Ship = O.ship_option(),
):
    """One HTML page (no network needed: inline SVG plots, no script) with the info summary, the recovery preview,
    message rate and latency, queues and consumer lag, a damage map along the CommitLog, index files and the problems.

    With --diff B the page adds where this store (A) and B part, the messages only on each side, per queue the divergent
    offsets and what consumers at their committed offsets skip or read twice on the other side.

    Exit 0 clean, 1 problems found or (--diff) the stores differ (the page is written either way), 2 unusable input or output.

    Over several stores (-s repeated, or a glob) one page for the fleet: a row per broker and the totals,
    message rate, damage and consumer lag per broker, then each broker's sections.

    Example:  rmqdump report -s /data/rocketmq/store --out incident-1234.html
    """
    from rmqdump.checks.cqunits import PROBLEM_COLUMNS
    from rmqdump.common.publish import check_target, publishing  # imported here: `rmqdump --help` loads no numpy
    from rmqdump.engines.local import local_map
    from rmqdump.readers.store import Store
    from rmqdump.report.collect import collect, collect_bytes
    from rmqdump.report.page import render as render_page

    version = broker_version("report", broker)
    refs = fleet(store)
    if refs is not None:
        from rmqdump.cli.fleetreport import fleet_report

        if diff is not None or problems_out is not None:
            render.fail("usage: --diff and --problems-out take one store (-s once)", 2)

        with contextlib.ExitStack() as stack:  # Spark: one session for the fleet; local: each store's own threads
            mapper = stack.enter_context(O.range_mapper(engine, workers, 0, master, spark_conf, ship)) if engine is O.Engine.spark else None
            code = fleet_report(refs, str(out), force=force, limit=limit, check_crc=not no_crc, workers=workers, broker_version=version, mapper=mapper)
        raise typer.Exit(code)
    st = Store.open(store[0] if store else ".", version)
    check_target(str(out), force=force, stores=[st.root], kind="file")  # before the long part: fail fast
    with contextlib.ExitStack() as stack:
        on_problem = None
        if problems_out is not None:
            tmp = stack.enter_context(publishing(str(problems_out), force=force, stores=[st.root], kind="file"))
            sink = stack.enter_context(open(tmp, "w", encoding="utf-8"))
            on_problem = lambda p: render.jsonl(p.to_dict(PROBLEM_COLUMNS), sink)  # noqa: E731
        cl_bytes = sum(f.size for f in st.commitlog.files)
        with O.range_mapper(engine, workers, cl_bytes, master, spark_conf, ship) as mapper, render.progress(collect_bytes(st), "report") as advance:
            rep = collect(st, check_crc=not no_crc, limit=limit, mapper=mapper, on_bytes=advance, on_problem=on_problem, temp_dir=str(out.absolute().parent))
        div = None
        if diff is not None:
            from rmqdump.checks.diffspill import system_arrow_pool
            from rmqdump.report.divergence import collect_divergence

            system_arrow_pool()
            other = Store.open(diff)
            if not other.commitlog.files:
                render.fail(f"no_commitlog: {other.root}: no CommitLog files found (--diff)", 2)
            # the two sides' CRCs side by side on this machine, as `diff` does on either engine (not CommitLog ranges)
            div = collect_divergence(st, other, check_crc=not no_crc, mapper=local_map(workers, cl_bytes), temp_dir=str(out.absolute().parent))
        page = render_page(rep, div)
    with publishing(str(out), force=force, stores=[st.root], kind="file") as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    render.err.print(
        f"wrote {out}: {rep.verify.messages} messages; {'; '.join(rep.causes) if rep.causes else 'no problems'}"
        + (f", a restart drops {rep.info.recovery.truncated_messages} messages" if rep.info.recovery and rep.info.recovery.truncated_messages else ""),
        highlight=False,
        markup=False,
    )
    raise typer.Exit(1 if rep.bad or (div is not None and not div.identical) else 0)


def register(app, guarded) -> None:
    app.command("report")(guarded(report))
