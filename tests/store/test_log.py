"""Logging: structlog loads when a process first logs, and the lines are the same as if
it had been loaded from the start (app/log.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

# Logs one line through Huey's stdlib logger and one through a project logger, in the
# order given, with structlog loaded before configure_logging or not; prints whether
# structlog was loaded before the first line.
LOG_TWO_LINES = """
import logging, sys
{preload}
from app.log import configure_logging, get_logger
configure_logging("info", "json")
loaded = "structlog" in sys.modules
lines = {{"stdlib": lambda: logging.getLogger("huey").warning("from.stdlib"),
          "project": lambda: get_logger("app.t").info("from.project", n=1)}}
for which in {order!r}:
    lines[which]()
logging.getLogger("x").debug("below.the.level")
print(loaded)
"""


def two_lines(order: tuple[str, str], preload: bool) -> tuple[bool, list[dict]]:
    code = LOG_TWO_LINES.format(order=order, preload="import structlog" if preload else "")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True, env={"PYTHONPATH": str(REPO_ROOT)})
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    for line in lines:
        assert line.pop("timestamp").endswith("Z")
    return done.stdout.strip() == "True", lines


@pytest.mark.parametrize("order", [("stdlib", "project"), ("project", "stdlib")])
def test_lines_logged_before_structlog_loaded_look_as_after(order):
    loaded_late, late = two_lines(order, preload=False)
    loaded_early, early = two_lines(order, preload=True)
    assert (loaded_late, loaded_early) == (False, True)
    assert late == early
    assert sorted(late, key=lambda line: line["event"]) == [
        {"event": "from.project", "n": 1, "level": "info", "logger": "app.t"},
        {"event": "from.stdlib", "level": "warning", "logger": "huey"}]


def test_structlog_is_loaded_by_app_log_only():
    """A module that imported structlog itself could log before configure_logging's
    set-up was applied; loggers come from app.log.get_logger."""
    importers = []
    for package in ("app", "workers"):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(name.split(".")[0] == "structlog" for name in names):
                    importers.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert [i for i in importers if not i.startswith("app/log.py:")] == []


@pytest.mark.parametrize("before", ["", "import rich.console"])  # the REPL loads rich first
def test_logging_loads_none_of_rich_for_tracebacks_hilo_does_not_show(before):
    code = (f"import io, sys\n{before}\n"
            "from app.log import configure_logging, get_logger\n"
            "configure_logging('info', 'console', stream=io.StringIO())\n"
            "get_logger('t').info('said.hello')\n"
            "rich = ('rich', 'rich.traceback', 'rich.pretty')\n"
            "print(sorted(name for name in rich if name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True, env={"PYTHONPATH": str(REPO_ROOT)})
    assert done.stdout.strip() == ("['rich']" if before else "[]")


# Logs a secret as a value, inside an error's message and in a traceback, in `fmt`.
LOG_A_SECRET = """
import io, sys
from app.log import configure_logging, get_logger
configure_logging("info", {fmt!r})
log = get_logger("app.t")
log.warning("model.refused", said="my password is Tr0ub4dor&3")
try:
    raise ValueError("server echoed Authorization: Bearer sk-abcdefghijklmnopqrstuvwx1234")
except ValueError:
    log.exception("relay.failed")
"""


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_secrets_are_redacted_from_every_line_and_traceback(fmt):
    done = subprocess.run([sys.executable, "-c", LOG_A_SECRET.format(fmt=fmt)], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(REPO_ROOT)})
    assert "Tr0ub4dor&3" not in done.stderr and "sk-abcdefghijklmnop" not in done.stderr
    assert done.stderr.count("[REDACTED:") >= 2
    assert "model.refused" in done.stderr and "ValueError" in done.stderr  # the lines stay
