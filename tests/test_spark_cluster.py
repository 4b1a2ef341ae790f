"""A real Spark standalone cluster on 127.0.0.1: a master and two workers started with the
launcher pyspark ships, the package shipped to executors as a zip (--ship auto), results equal
to the local engine's. The executors' Python cannot import rmqdump by itself (no site
packages processing), so a passing run proves the shipped zip is what they ran."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import REAL, jsonl, manifest, need_pyspark, run
from test_export import check_against_manifest, read_dataset
from test_spark_python import RMQDUMP, bare_env

from rmqdump.engines.spark.session import ENV_ALIAS, EXECUTOR_MODULE_MISSING
from rmqdump.export.dataset import export_ranges
from rmqdump.scan.splits import resolve_stores

pyspark = need_pyspark()

pytestmark = pytest.mark.cluster

SPARK_HOME = os.path.dirname(pyspark.__file__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited {proc.returncode}: {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {text!r} in {path}: {path.read_text(errors='replace')[-2000:]}")


def _daemon(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    with open(log, "wb") as f:
        return subprocess.Popen([os.path.join(SPARK_HOME, "bin", "spark-class"), *args], stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    scratch = tmp / "scratch"  # the temp directory of the cluster's processes and its Python workers (their TMPDIR)
    scratch.mkdir()
    env = dict(os.environ, SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1", TMPDIR=str(scratch))
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    try:
        mlog = tmp / "master.log"
        procs.append(
            _daemon(
                ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port())],
                mlog,
                env,
            )
        )
        _wait_for(mlog, "I have been elected leader", procs[0])
        for i in range(2):
            wlog = tmp / f"worker{i}.log"
            work = tmp / f"work{i}"
            work.mkdir()
            w = _daemon(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "2",  # one for the module's in-process application (on_cluster), one for the commands run as processes
                    "--memory",
                    "2g",
                    "--webui-port",
                    str(_free_port()),
                    "--work-dir",
                    str(work),
                ],
                wlog,
                env,
            )
            procs.append(w)
        for i in range(2):
            _wait_for(tmp / f"worker{i}.log", "Successfully registered with master", procs[i + 1])
        yield url, tmp
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory) -> str:
    """The executors' interpreter: this venv's Python without site processing, so the editable
    rmqdump install is invisible and only the shipped zip can provide it."""
    d = tmp_path_factory.mktemp("pyexec")
    script = d / "python"
    site = sysconfig.get_paths()["purelib"]
    script.write_text(f'#!/bin/sh\nexport PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}"\nexec {sys.executable} -S "$@"\n')
    script.chmod(0o755)
    probe = subprocess.run([str(script), "-c", "import rmqdump"], capture_output=True, text=True, cwd=str(d))
    assert probe.returncode != 0 and "rmqdump" in probe.stderr
    assert subprocess.run([str(script), "-c", "import pyarrow, numpy, pandas"], cwd=str(d)).returncode == 0
    return str(script)


def _spark_args(url: str, python: str) -> list[str]:
    return [
        "--engine",
        "spark",
        "--master",
        url,
        "--driver-memory",
        "1g",
        "--spark-conf",
        f"spark.pyspark.python={python}",
        "--spark-conf",
        "spark.driver.host=127.0.0.1",
        "--spark-conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--spark-conf",
        "spark.executor.memory=1g",
    ]


@pytest.fixture(scope="module")
def on_cluster(cluster, executor_python):
    """This process's SparkSession on the cluster, its executors on both workers running the executor Python that
    cannot import rmqdump but from the shipped zip. Commands run in-process (conftest.run) with `--engine spark` join
    it, as a command joins any running session: one application for the module's commands, not one each (the tests
    about the command's own process, its Python and its shipping, run it as a process). Returns the arguments that
    make a command run on it."""
    from conftest import stop_shared_spark

    from rmqdump.engines.spark.session import build_session

    url, _ = cluster
    stop_shared_spark()  # one SparkContext a process: the run's local session gives way, and is started again after
    conf = [a for a in _spark_args(url, executor_python)[6:] if a != "--spark-conf"]
    conf += ["spark.executor.cores=1", "spark.cores.max=2"]  # an executor on each worker, a core of each left for the processes
    s = build_session(url, conf, driver_memory="1g")
    try:
        yield ["--engine", "spark", "--master", url]
    finally:
        s.stop()


def _apps(tmp: Path) -> set[str]:
    """The applications whose executors ran on the workers (their app-* directories)."""
    return {p.name for w in ("work0", "work1") for p in (tmp / w).iterdir()}


def test_export_on_standalone_cluster(on_cluster, tmp_path):
    stores = [str(REAL / n / "store") for n in ("rmq53-v2", "rmq4-flags", "rmq4-crash")]
    out = tmp_path / "spark"
    r = run("export", *[a for s in stores for a in ("-s", s)], "-o", str(out), "--body", "raw", "--range-bytes", "64K", *on_cluster)
    assert r.exit_code == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["engine"] == "spark" and summary["splits"] > 30
    local = export_ranges(resolve_stores(stores), str(tmp_path / "local"), with_body=True)
    assert summary["messages"] == local.messages
    got = read_dataset(out)
    assert got == read_dataset(tmp_path / "local")
    for name in ("rmq53-v2", "rmq4-flags", "rmq4-crash"):  # each store's rows are exactly its manifest's records, nothing else
        check_against_manifest(name, [r for r in got if r["broker"] == name])
    assert {r["broker"] for r in got} == {"rmq53-v2", "rmq4-flags", "rmq4-crash"}


def test_cq_verify_on_standalone_cluster(on_cluster, tmp_path):
    store = str(REAL / "rmq4-crash" / "store")
    r = run("cq", "verify", "-s", store, "-f", "jsonl", *on_cluster)
    local = run("cq", "verify", "-s", store, "-f", "jsonl")
    assert r.exit_code == local.exit_code == 1, r.stderr[-3000:]
    got = [json.loads(x) for x in r.stdout.splitlines()]
    want = [json.loads(x) for x in local.stdout.splitlines()]
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    assert got[-1] == want[-1] and got[-1]["problems"] == 500


def _bare_run(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI by absolute path, as a user runs it without activating its venv."""
    return subprocess.run([str(RMQDUMP), *args], capture_output=True, text=True, env=env, cwd=str(cwd), timeout=900)


def _net_args(url: str) -> list[str]:
    return [
        "--engine",
        "spark",
        "--master",
        url,
        "--driver-memory",
        "1g",
        "--spark-conf",
        "spark.driver.host=127.0.0.1",
        "--spark-conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--spark-conf",
        "spark.executor.memory=1g",
    ]


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    return bare_env(tmp_path_factory.mktemp("bare"))


def test_cli_by_absolute_path_on_standalone_cluster(cluster, bare, tmp_path):
    """python3 on PATH lacks pyarrow: a standalone master on this host gets the driver's interpreter."""
    url, _ = cluster
    env, _ = bare
    out = tmp_path / "out"
    r = _bare_run(["export", "-s", str(REAL / "rmq4-flags" / "store"), "-o", str(out), "--range-bytes", "16K", *_net_args(url)], env, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    check_against_manifest("rmq4-flags", read_dataset(out))


def test_ship_venv_on_standalone_cluster(cluster, bare, tmp_path):
    """--ship venv: the executors run the packed environment Spark unpacked for them (spark.archives)."""
    url, work = cluster
    env, _ = bare
    before = set(work.glob(f"work*/app-*/*/{ENV_ALIAS}/bin/python"))
    out = tmp_path / "out"
    r = _bare_run(["export", "-s", str(REAL / "rmq4-flags" / "store"), "-o", str(out), "--ship", "venv", *_net_args(url)], env, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    check_against_manifest("rmq4-flags", read_dataset(out))
    unpacked = set(work.glob(f"work*/app-*/*/{ENV_ALIAS}/bin/python")) - before
    assert unpacked, "no executor unpacked the shipped environment"
    for py in unpacked:
        assert subprocess.run([str(py), "-c", "import numpy, pyarrow, pandas"], env=env).returncode == 0


def test_executor_without_pyarrow_on_standalone_cluster(cluster, bare, tmp_path):
    url, _ = cluster
    env, py = bare
    net = [a for a in _net_args(url) if a not in ("--driver-memory", "1g")]
    r = _bare_run(["cq", "verify", "-s", str(REAL / "rmq4-flags" / "store"), *net, "--spark-conf", f"spark.pyspark.python={py}"], env, tmp_path)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    ours = [x for x in r.stderr.splitlines() if x.startswith("rmqdump: ")]
    assert len(ours) == 1 and ours[0].startswith(f"rmqdump: {EXECUTOR_MODULE_MISSING}: numpy: executor Python {py} "), r.stderr[-3000:]
    assert "pyarrow" in ours[0] and "fix: " in ours[0]


@pytest.mark.parametrize("name", ["rmq53-batchcq", "rmq53-rocksdbcq"])
def test_5x_queue_kinds_on_standalone_cluster(cluster, on_cluster, name, tmp_path):
    """A Batch ConsumeQueue store and a RocksDB ConsumeQueue store: cq verify, rebuild and export on the cluster give
    the local engine's findings, files and rows; the rebuilt queues are the broker's (its files, or the units its
    manifest lists for RocksDB), the rows its records."""
    from test_spark import _export_rows, _manifest_records, _tree, _units

    store = REAL / name / "store"
    sizing = ["--hash-slots", "500", "--index-entries", "2000", "--cq-units-per-file", "120"]  # the README's maxHashSlotNum, maxIndexNum, 2400-byte queue files

    scratch = cluster[1] / "scratch"  # the executors' temp directory
    r = run("cq", "verify", "-s", str(store), "-f", "jsonl", *on_cluster)
    local = run("cq", "verify", "-s", str(store), "-f", "jsonl")
    assert r.exit_code == local.exit_code == 0, r.stderr[-3000:]
    assert r.stdout == local.stdout
    # each worker's RocksDB mirror is gone, though Python workers exit without running atexit hooks
    assert sorted(p.name for p in scratch.iterdir() if p.name.startswith("rmqdump-")) == []
    assert json.loads(r.stdout.splitlines()[-1])["messages"] == len(_manifest_records(name, ""))

    r = run("rebuild", str(store), "--out", str(tmp_path / "s"), "--no-sync", "-f", "jsonl", *sizing, *on_cluster)
    local = run("rebuild", str(store), "--out", str(tmp_path / "l"), "--no-sync", "-f", "jsonl", *sizing)
    assert r.exit_code == local.exit_code == 0, r.stderr[-3000:]
    assert _tree(tmp_path / "s") == _tree(tmp_path / "l")
    if name == "rmq53-batchcq":
        for part in ("batchconsumequeue", "consumequeue"):
            assert _tree(tmp_path / "s" / part) == _tree(store / part), part
    else:
        units = [m for m in manifest(name) if m.get("kind") == "cq_unit"]
        for u in units:
            raw = (tmp_path / "s" / "consumequeue" / u["topic"] / str(u["queueId"]) / f"{u['queueOffset'] // 120 * 2400:020d}").read_bytes()
            got = _units(raw)[u["queueOffset"] % 120]
            assert (int(got["offset"]), int(got["size"]), int(got["tags"])) == (u["commitLogOffset"], u["size"], u["tagsCode"])

    out = tmp_path / "e"
    r = run("export", "-s", f"{name}={store}", "-o", str(out), "--body", "raw", "--range-bytes", "16K", *on_cluster)
    assert r.exit_code == 0, r.stderr[-3000:]
    got = read_dataset(out)
    export_ranges(resolve_stores([f"{name}={store}"]), str(tmp_path / "el"), with_body=True)
    assert got == read_dataset(tmp_path / "el")
    assert _export_rows(got) == _manifest_records(name, "")


def test_salvage_and_repair_on_standalone_cluster(on_cluster, tmp_path):
    """rmq53-damaged-midfile-magic (the broker keeps 998 of 4000 puts): salvage with the cluster surveying the ranges
    re-sends exactly the intact puts the broker's recovery drops (broker-recovery.json); repair with the cluster
    scanning and copying them gives a NEWDIR on which the broker's own recovery keeps every intact put."""
    from conftest import broker_recovery
    from test_repair import check_broker_keeps, puts
    from test_salvage import rows, served

    name = "rmq53-damaged-midfile-magic"
    base = REAL / name
    recs = json.loads((base / "damage.json").read_text())["recordsHit"]
    hit = {r["physicalOffset"] for r in recs}
    header_only = {r["physicalOffset"] for r in recs if set(r["fieldsHit"]) <= {"magicCode", "totalSize"}}  # given back restored
    intact = [m for m in puts(name) if m["wroteOffset"] not in hit]
    kept = served(json.loads((base / "broker-recovery.json").read_text()))

    r = run("salvage", str(base / "store"), "--out", str(tmp_path / "salvaged"), *on_cluster)
    assert r.exit_code == 1, r.stderr[-3000:]
    resend = {x["phys_offset"]: x["uniq_key"] for x in rows(tmp_path / "salvaged", "messages")}
    back = [m for m in puts(name) if m["wroteOffset"] not in hit or m["wroteOffset"] in header_only]
    assert resend == {m["wroteOffset"]: m["uniqKey"] for m in back if m["wroteOffset"] not in kept}

    new = tmp_path / "repaired"
    r = run("repair", str(base / "store"), "--out", str(new), "--hash-slots", "500", "--index-entries", "2000", *on_cluster)
    assert r.exit_code == 1, r.stderr[-3000:]
    check_broker_keeps(broker_recovery(new, tmp_path / "oracle.json"), intact)


def test_index_verify_and_report_on_standalone_cluster(cluster, on_cluster, monkeypatch, tmp_path):
    """rmq4-crash with the cluster reading the ranges: index verify misses exactly the entries of the messages crash.json
    says were not dispatched (test_index_verify's own check, its command run here as a process on the cluster); the
    report's findings are exactly those messages' missing ConsumeQueue units, and it exits 1."""
    import test_index_verify
    from pyspark.sql import SparkSession

    _, tmp = cluster
    sc = SparkSession.getActiveSession().sparkContext
    jobs = set(sc.statusTracker().getJobIdsForGroup())

    def spark_run(*args):
        return run(*args, *on_cluster)

    monkeypatch.setattr(test_index_verify, "run", spark_run)
    test_index_verify.test_crashed_store_reports_exactly_the_undispatched_messages()

    name = "rmq4-crash"
    dispatched = set(json.loads((REAL / name / "crash.json").read_text())["dispatchedSeqs"])
    lost = {(m["topic"], m["queueId"], m["logicsOffset"], m["wroteOffset"]) for m in manifest(name) if m["seq"] not in dispatched}
    probs = tmp_path / "problems.jsonl"
    r = spark_run("report", "-s", str(REAL / name / "store"), "-o", str(tmp_path / "page.html"), "--problems-out", str(probs))
    assert r.exit_code == 1 and (tmp_path / "page.html").stat().st_size > 0, r.stderr[-3000:]
    found = [json.loads(x) for x in probs.read_text(encoding="utf-8").splitlines()]
    assert {x["code"] for x in found} == {"cq_missing_unit"}
    assert len(found) == len(lost) == 500
    assert {(x["topic"], x["queue_id"], x["unit_index"], x["phys_offset"]) for x in found} == lost
    # the commands' ranges were tasks of this application's executors, on both workers
    assert sc.applicationId in _apps(tmp) and all((tmp / w / sc.applicationId).is_dir() for w in ("work0", "work1"))
    tracker = sc.statusTracker()
    tasks = sum(tracker.getStageInfo(st).numCompletedTasks for j in set(tracker.getJobIdsForGroup()) - jobs for st in tracker.getJobInfo(j).stageIds)
    assert tasks >= 2 * len(os.listdir(REAL / name / "store" / "commitlog"))  # index verify's and report's ranges


SQL_FLEET = ["rmq4-crash", "rmq4-flags", "rmq53-v2"]
QUERY = (
    "SELECT m.broker, m.topic, count(*) AS n, sum(CASE WHEN u.phys_offset IS NULL THEN 1 ELSE 0 END) AS undispatched "
    "FROM messages m LEFT JOIN units u ON u.broker = m.broker AND u.phys_offset = m.phys_offset GROUP BY m.broker, m.topic"
)


def sql_truth() -> Counter:
    """(broker, topic) -> (messages, messages without a unit), from the manifests and rmq4-crash's crash.json."""
    done = set(json.loads((REAL / "rmq4-crash" / "crash.json").read_text())["dispatchedSeqs"])
    out: dict = {}
    for n in SQL_FLEET:
        for m in manifest(n):
            lost = (m["seq"] not in done) if n == "rmq4-crash" else m["sysFlag"] & 0xC in (0x4, 0xC)
            k = (n, m["topic"])
            a, b = out.get(k, (0, 0))
            out[k] = (a + 1, b + int(lost))
    return out


def test_sql_on_standalone_cluster(on_cluster):
    """`sql --engine spark` on the cluster: a fleet's rows equal DuckDB's and the stores' truth."""
    args = ["sql", *[a for n in SQL_FLEET for a in ("-s", str(REAL / n / "store"))], "-f", "jsonl"]
    r = run(*args, *on_cluster, QUERY)
    assert r.exit_code == 0, r.stderr[-3000:]
    got = sorted(jsonl(r.stdout), key=lambda d: (d["broker"], d["topic"]))
    duck = run(*args, QUERY)
    assert got == sorted(jsonl(duck.stdout), key=lambda d: (d["broker"], d["topic"]))
    assert {(d["broker"], d["topic"]): (d["n"], d["undispatched"]) for d in got} == sql_truth()
