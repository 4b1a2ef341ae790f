"""One module of rmqdump/ builds Spark jobs over ranges and work lists (rmqdump/engines/spark/rangemap.py): the other
Spark modules hand it a range -> Arrow batches function and fold what comes back. Read from the source with ast,
so a pipeline built by hand anywhere else fails here. Needs no Spark."""

from __future__ import annotations

import ast
from pathlib import Path

import rmqdump

ROOT = Path(rmqdump.__file__).parent
HOME = "engines/spark/rangemap.py"
BUILDERS = {"mapInArrow", "createDataFrame", "parallelize", "runJob"}  # what turns driver-side items into Spark tasks
# the session's start-up probe asks every executor slot whether it can import rmqdump: a job over cores, not ranges
ALLOWED = {"engines/spark/session.py": {"parallelize"}}


def builder_calls(source: str) -> set[str]:
    """The pipeline-building methods a module's code reaches (`x.mapInArrow(...)`, `submit(sc.runJob, ...)`, ...)."""
    return {node.attr for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Attribute) and node.attr in BUILDERS}


def built_elsewhere(sources: dict[str, str]) -> dict[str, list[str]]:
    """Module path -> the builders it calls that it should leave to the home module."""
    out = {}
    for path, text in sources.items():
        extra = builder_calls(text) - ALLOWED.get(path, set())
        if path != HOME and extra:
            out[path] = sorted(extra)
    return out


def package_sources() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in ROOT.rglob("*.py")}


def test_only_the_home_module_builds_spark_pipelines():
    sources = package_sources()
    assert {"mapInArrow", "createDataFrame", "parallelize", "runJob"} <= builder_calls(sources[HOME])  # it is read
    assert built_elsewhere(sources) == {}


def test_the_check_finds_a_pipeline_built_by_hand():
    sources = package_sources()
    hand = "def f(spark, splits):\n    df = spark.createDataFrame([(i,) for i in range(len(splits))], 'split_no int')\n    return df.mapInArrow(g, 'x int')\n"
    sources["engines/spark/newpass.py"] = hand
    sources["engines/spark/session.py"] += "\n\ndef h(sc):\n    return sc.runJob(sc.parallelize([1]), len)\n"
    assert built_elsewhere(sources) == {"engines/spark/newpass.py": ["createDataFrame", "mapInArrow"], "engines/spark/session.py": ["runJob"]}
    assert builder_calls("'mapInArrow' in text  # a mention is no call") == set()
