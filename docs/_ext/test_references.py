"""Every pytest node id the docs name must be a test pytest collects.

A code span that looks like a node id (```tests/sends/test_crashes.py::test_x```) is
a claim that this test exists and proves what the page says; the build runs
``pytest --collect-only`` once and fails on any id it does not collect, so a renamed
or deleted test cannot leave a promise without its proof. An id without parameters
also matches its parametrised cases.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.errors import SphinxError
from sphinx.util import logging

logger = logging.getLogger(__name__)


class MissingTests(SphinxError):
    """The docs name tests that pytest does not collect (or pytest cannot collect at all)."""

    category = "Tests named in the docs are missing"


NODE_ID = re.compile(r"tests/[\w/]+\.py::[\w\[\]\-.:,]+")
ROOT = Path(__file__).resolve().parents[2]


def _references(env: BuildEnvironment) -> dict[str, list[tuple[str, int | None]]]:
    """Return (and create) node id -> [(docname, line)] on the environment."""
    if not hasattr(env, "scheduler_test_references"):
        env.scheduler_test_references = {}
    return env.scheduler_test_references


def collect_references(app: Sphinx, doctree: nodes.document) -> None:
    refs = _references(app.env)
    for literal in doctree.findall(nodes.literal):
        text = literal.astext().strip()
        if NODE_ID.fullmatch(text):
            refs.setdefault(text, []).append((app.env.docname, literal.line))


def purge_references(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    for places in _references(env).values():
        places[:] = [place for place in places if place[0] != docname]


def merge_references(app: Sphinx, env: BuildEnvironment, docnames: Any, other: Any) -> None:
    refs = _references(env)
    for node_id, places in _references(other).items():
        refs.setdefault(node_id, []).extend(p for p in places if p[0] in docnames)


def collected_tests() -> set[str]:
    """Return the node ids pytest collects (SQLite settings; nothing runs)."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise MissingTests(
            "pytest --collect-only failed (exit %s):\n%s%s"
            % (result.returncode, result.stdout[-3000:], result.stderr[-3000:])
        )
    return {line.strip() for line in result.stdout.splitlines() if "::" in line}


def check_references(app: Sphinx, env: BuildEnvironment) -> None:
    refs = {node_id: places for node_id, places in _references(env).items() if places}
    if not refs:
        return
    tests = collected_tests()
    bases = {test.split("[", 1)[0] for test in tests}
    missing = sorted(node_id for node_id in refs if node_id not in tests | bases)
    for node_id in missing:
        for docname, line in refs[node_id]:
            logger.error(
                "the docs name test %s, which pytest does not collect",
                node_id,
                location=(docname, line),
            )
    if missing:
        raise MissingTests(
            "%d test(s) named in the docs are not collected by pytest: %s"
            % (len(missing), ", ".join(missing))
        )
    logger.info("test references: %d named, all collected by pytest", len(refs))


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("doctree-read", collect_references)
    app.connect("env-purge-doc", purge_references)
    app.connect("env-merge-info", merge_references)
    app.connect("env-check-consistency", check_references)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
