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
from pathlib import Path

import pytest
from conftest import REAL, run_proc
from test_export import read_dataset

from rmqdump.export.dataset import export_local
from rmqdump.scan.splits import resolve_stores

pyspark = pytest.importorskip("pyspark")

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
    env = dict(os.environ, SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
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
                    "1",
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


def test_export_on_standalone_cluster(cluster, executor_python, tmp_path):
    url, _ = cluster
    stores = [str(REAL / n / "store") for n in ("rmq53-v2", "rmq4-flags", "rmq4-crash")]
    out = tmp_path / "spark"
    args = ["export", *[a for s in stores for a in ("-s", s)], "-o", str(out), "--body", "raw", "--split-size", "64K", *_spark_args(url, executor_python)]
    r = run_proc(*args, cwd=str(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["engine"] == "spark" and summary["splits"] > 30
    local = export_local(resolve_stores(stores), str(tmp_path / "local"), with_body=True)
    assert summary["messages"] == local.messages
    assert read_dataset(out) == read_dataset(tmp_path / "local")


def test_cq_verify_on_standalone_cluster(cluster, executor_python, tmp_path):
    url, _ = cluster
    store = str(REAL / "rmq4-crash" / "store")
    spark_args = [a for a in _spark_args(url, executor_python) if a not in ("--driver-memory", "1g")]
    r = run_proc("cq", "verify", "-s", store, "-f", "jsonl", *spark_args, cwd=str(tmp_path), timeout=600)
    local = run_proc("cq", "verify", "-s", store, "-f", "jsonl", cwd=str(tmp_path))
    assert r.returncode == local.returncode == 1, r.stderr[-3000:]
    got = [json.loads(x) for x in r.stdout.splitlines()]
    want = [json.loads(x) for x in local.stdout.splitlines()]
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    assert got[-1] == want[-1] and got[-1]["problems"] == 500
