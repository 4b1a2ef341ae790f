"""`cq verify` of stores repaired by rmqdump, `index verify` and `report` with `--engine spark` on a real local[2]
session, judged by the stores' truth: the local tests' own checks (damage.json, manifests, crash.json, the broker's
recovered.json) run again with their command given `--engine spark`, and each run must have been Spark's tasks."""

from __future__ import annotations

import pytest
import test_cq_verify
import test_index_verify
import test_report
from conftest import need_pyspark, store_root

need_pyspark()

SPARK = ("--engine", "spark", "--master", "local[2]")


def _jobs(spark) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup())


def _tasks_since(spark, before: set[int]) -> int:
    """Spark tasks run by the jobs started since `before` (a session's first use also runs a small executor check)."""
    tracker = spark.sparkContext.statusTracker()
    infos = [tracker.getJobInfo(j) for j in _jobs(spark) - before]
    stages = [tracker.getStageInfo(s) for i in infos if i is not None for s in i.stageIds]
    return sum(st.numTasks for st in stages if st is not None)


def _commitlog_files(*names: str) -> int:
    """Each CommitLog file is at least one range, so at least one task when the ranges are Spark's."""
    return sum(1 for n in names for f in (store_root(n) / "commitlog").iterdir() if f.name.isdigit())


@pytest.fixture
def on_spark(spark, monkeypatch):
    """patch(module, words, store names): `module.run` gives `--engine spark` to the command `words`; afterwards Spark
    must have run at least a task per CommitLog file of those stores (a range is never two files)."""
    before = _jobs(spark)
    used: list[tuple[str, ...]] = []

    def patch(module, words: tuple[str, ...], *stores: str) -> None:
        plain = module.run
        used.append(stores)

        def run(*args):
            if tuple(str(a) for a in args[: len(words)]) == words:
                args = (*args, *SPARK)
            return plain(*args)

        monkeypatch.setattr(module, "run", run)

    yield patch
    assert used, "no command was given --engine spark"
    assert _tasks_since(spark, before) >= _commitlog_files(*used[0]), "the CommitLog's ranges were not Spark's tasks"


# --- (cq verify) a store repaired by `rmqdump repair`: repair's filler units listed, nothing else, exit 0 ---


@pytest.mark.slow
@pytest.mark.parametrize("name", test_cq_verify.DAMAGED)
def test_repaired_store_lists_repairs_filler_units_on_spark(on_spark, name, tmp_path):
    """The filler units each destroyed message left (damage.json and the manifest, test_cq_verify's model), found by the
    Spark engine's group tasks; repair itself runs locally."""
    on_spark(test_cq_verify, ("cq", "verify"), f"rmq53-damaged-{name}")
    test_cq_verify.test_repaired_store_lists_repairs_filler_units_and_nothing_else(name, tmp_path)


# --- index verify ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rmq4-flags", "rmq53-v2"])
def test_index_verify_healthy_stores_on_spark(on_spark, name):
    on_spark(test_index_verify, ("index", "verify"), name)
    test_index_verify.test_healthy_stores_have_no_problems(name)


def test_index_verify_crash_store_on_spark(on_spark):
    """rmq4-crash: exactly the messages crash.json says were not dispatched miss their entries, and the index is behind."""
    on_spark(test_index_verify, ("index", "verify"), "rmq4-crash")
    test_index_verify.test_crashed_store_reports_exactly_the_undispatched_messages()


def test_index_verify_entry_into_a_record_on_spark(on_spark, tmp_path):
    on_spark(test_index_verify, ("index", "verify"), "rmq53-v2")  # a copy of it, one index entry changed
    test_index_verify.test_entry_into_the_middle_of_a_record(tmp_path)


# --- report -----------------------------------------------------------------------------------------------------------


REPORTED = ("rmq4-crash", "rmq4-basic")


@pytest.fixture(scope="module", params=["each", "fleet"])
def spark_reports(request, spark, tmp_path_factory):
    """`rmqdump report --engine spark` on rmq4-crash and rmq4-basic, each alone or both as a fleet (one command, one
    session for both stores): the exit codes and the Report of each store the page was drawn from."""
    from conftest import run

    from rmqdump.report import fleetpage, page

    drawn, codes = {}, {}
    out = tmp_path_factory.mktemp("report") / "page.html"
    before = _jobs(spark)
    one_page, fleet_page = page.render, fleetpage.render

    def one(rep, div=None, **kw):
        drawn[name] = rep
        return one_page(rep, div, **kw)

    def fleet(brokers, errors=(), **kw):
        drawn.update(brokers)
        return fleet_page(brokers, errors, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(page, "render", one)
        mp.setattr(fleetpage, "render", fleet)
        if request.param == "each":
            for name in REPORTED:
                codes[name] = run("report", "-s", store_root(name), "-o", out, "--force", *SPARK).exit_code
        else:
            codes["fleet"] = run("report", *[f"--store={n}={store_root(n)}" for n in REPORTED], "-o", out, *SPARK).exit_code
    assert _tasks_since(spark, before) >= _commitlog_files(*REPORTED), "the CommitLog's ranges were not Spark's tasks"
    assert set(drawn) == set(REPORTED)
    return drawn, codes


def test_report_exit_codes_on_spark(spark_reports):
    _, codes = spark_reports
    # the crash's 500 undispatched messages; the clean store clean; a fleet with a broker with problems
    assert codes in ({"rmq4-crash": 1, "rmq4-basic": 0}, {"fleet": 1})


@pytest.mark.parametrize("name", ["rmq4-crash", "rmq4-basic"])
def test_report_traffic_is_the_manifests_on_spark(spark_reports, name):
    reps, _ = spark_reports
    test_report.test_rate_bins_are_the_manifest_binned(name, reps["rmq4-crash"], reps["rmq4-basic"])
    test_report.test_latency_buckets_are_the_manifest_latencies(name, reps["rmq4-crash"], reps["rmq4-basic"])


def test_report_crash_store_is_the_brokers_on_spark(spark_reports):
    crash = spark_reports[0]["rmq4-crash"]
    test_report.test_damage_map_places_the_crash_lost_units(crash)
    test_report.test_recovery_and_unwritten_tail_match_the_broker(crash)
    test_report.test_index_stats_match_the_broker_headers(crash)


def test_report_clean_store_is_the_brokers_on_spark(spark_reports):
    basic = spark_reports[0]["rmq4-basic"]
    test_report.test_index_keys_are_the_manifest_keys(basic)
    test_report.test_consumer_lag_against_the_committed_file_and_the_manifest(basic)
