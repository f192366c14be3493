"""Where a terminal command runs: under bubblewrap, with a clean environment.

`[tools] terminal_sandbox = "bubblewrap"` (the default): every command runs as

    bwrap --die-with-parent --new-session --unshare-net --unshare-pid --unshare-ipc
          --unshare-uts --unshare-cgroup-try --unshare-user-try --cap-drop ALL
          --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --tmpfs /run
          --bind WORKDIR WORKDIR [--tmpfs DATA_DIR] [--ro-bind /dev/null CONFIG_FILE]
          --chdir WORKDIR -- COMMAND…

no network (its own empty loopback), its own processes, the filesystem read-only but for
the working folder, an empty /tmp. `--cap-drop ALL` matters when Hilo runs as root: a
root process keeps its capabilities inside and could remount / read-write. /run is
emptied because a read-only mount does not stop a connection to a Unix socket (the
Docker or D-Bus socket there would run anything). Hilo's data directory and config file
are hidden (the memory and the server's token).

Where bwrap is missing or cannot start (no user namespaces, say), the terminal is off
and says why in one line; `terminal_sandbox = "none"` is the owner's explicit choice to
run commands as they are.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.config import Config
from app.log import get_logger
from app.sanitize import secret_kind
from app.turn.tools.registry import ToolFailed

log = get_logger(__name__)

# Environment variables never handed to a command: credentials by name, and Hilo's own.
SECRET_NAME = re.compile(r"(?i)(key|token|secret|passw|_pwd(_|$)|credential|creds?(_|$)|auth"
                         r"|cookie|session|private|dsn|webhook|^hilo_)")
# ... and by value: a URL carrying credentials (a Sentry DSN's key, user:password@), a
# webhook URL (its path is the secret), an Authorization header's value.
SECRET_VALUE = re.compile(
    r"(?i)^\s*(?:[a-z][a-z0-9+.-]*://[^/@\s]+@"
    r"|https?://\S*(?:hooks\.slack\.com/|/api/webhooks/|webhook)"
    r"|(?:basic|bearer|token|digest)\s+\S{8,})")
_PROBE_TIMEOUT_SECONDS = 10.0


# What a command sees of the environment: only what programs need to behave, and what
# the owner lists in [tools] terminal_environment. A variable of any other name may hold
# something private that no pattern recognises ("DEPLOY_NOTE=the vault words").
BASE_ENVIRONMENT = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ",
                              "TERM", "COLORTERM", "NO_COLOR", "COLUMNS", "LINES", "TMPDIR",
                              "EDITOR", "VISUAL", "PAGER"})


def scrubbed_environment(environ: Mapping[str, str],
                         passed: Iterable[str] = ()) -> dict[str, str]:
    """The variables of `environ` a command may see: the base ones, the locale's and
    `passed`, less any credential — by name, Hilo's own, or by what the value looks like."""
    allowed = BASE_ENVIRONMENT | set(passed)
    return {name: value for name, value in environ.items()
            if (name in allowed or name.startswith("LC_"))
            and not SECRET_NAME.search(name) and not SECRET_VALUE.search(value)
            and secret_kind(f"{name}={value}") is None}


@dataclass(frozen=True)
class Sandbox:
    """bubblewrap, and what it hides besides the defaults."""

    bwrap: str
    hidden_folders: tuple[Path, ...] = ()
    hidden_files: tuple[Path, ...] = ()

    def argv(self, command: list[str], workdir: Path) -> list[str]:
        """`command` as run inside the sandbox, with `workdir` its one writable folder."""
        folder = str(workdir)
        argv = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-net",
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--unshare-user-try", "--cap-drop", "ALL", "--ro-bind", "/", "/",
                "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run",
                "--bind", folder, folder]
        for hidden in self.hidden_folders:
            if not _within(workdir, hidden):  # hiding it would hide the working folder
                argv += ["--tmpfs", str(hidden)]
        for hidden in self.hidden_files:
            argv += ["--ro-bind", "/dev/null", str(hidden)]
        return [*argv, "--chdir", folder, "--", *command]


def sandbox_for(config: Config) -> Sandbox | None:
    """The sandbox `[tools] terminal_sandbox` asks for (None: "none", the owner's choice);
    ToolFailed, in one line, when bubblewrap is missing or cannot start here."""
    if config.tools.terminal_sandbox == "none":
        return None
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise ToolFailed(_off("bubblewrap (bwrap) is not installed"))
    failure = _start_failure(bwrap)
    if failure is not None:
        raise ToolFailed(_off(f"bubblewrap cannot start here ({failure})"))
    folders = tuple(p.resolve() for p in [config.data_dir] if p.is_dir())
    files = tuple(p.resolve() for p in [config.origin.file] if p is not None and p.is_file())
    return Sandbox(bwrap, folders, files)


def _off(why: str) -> str:
    return (f"the terminal is off: {why}, and it runs commands only in that sandbox; "
            "install it (apt-get install bubblewrap) or set [tools] terminal_sandbox = "
            '"none" to run commands unsandboxed')


@functools.lru_cache(maxsize=8)
def _start_failure(bwrap: str) -> str | None:
    """Why bwrap cannot run a command with our flags here, or None; asked once per
    process (a failure is logged once too)."""
    probe = Sandbox(bwrap).argv(["/bin/true"], Path("/"))  # any folder: the flags matter
    try:
        done = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=_PROBE_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        failure = str(exc)
    else:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        failure = None if done.returncode == 0 else (lines[-1] if lines else
                                                     f"exit status {done.returncode}")
    if failure is not None:
        log.warning("terminal.sandbox_unavailable", bwrap=bwrap, error=failure)
    return failure


def _within(path: Path, folder: Path) -> bool:
    path, folder = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return path == folder or folder in path.parents
