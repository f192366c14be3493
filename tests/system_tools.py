"""System programs some tests run for real (redis-server, bwrap, make, chromium).

Elsewhere a machine without one skips those tests; under CI (`.ci/run` sets CI and
installs them) a missing program fails the test instead of passing it silently.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def required_tool(name: str, install: str) -> str:
    """The program's path; skips the test without it, fails it under CI."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name} is not installed: {install} (.ci/run does)"
    if in_ci():
        pytest.fail(f"CI is set but {message}", pytrace=False)
    pytest.skip(message)


def interpreter() -> str:
    """This Python's interpreter itself, not the virtualenv's link to it: a program a
    sandboxed command can run wherever the checkout lives (the sandbox gives commands an
    empty /tmp, which hides a checkout there, its virtualenv with it)."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return str(base) if base.is_file() else os.path.realpath(sys.executable)
