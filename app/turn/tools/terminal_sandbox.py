"""Where a terminal command runs: under bubblewrap, with limits and a clean environment.

`[tools] terminal_sandbox = "bubblewrap"` (the default): every command runs as

    prlimit --as=MEMORY --cpu=SECONDS --
    bwrap --die-with-parent --new-session --unshare-net --unshare-pid --unshare-ipc
          --unshare-uts --unshare-cgroup-try --unshare-user-try --cap-drop ALL
          --ro-bind / / --dev /dev --size MEMORY --tmpfs /dev/shm --remount-ro /dev
          --proc /proc --size MEMORY --tmpfs /tmp --tmpfs /run --remount-ro /run
          [--tmpfs DATA_DIR] [--ro-bind /dev/null CONFIG_FILE]
          --bind WORKDIR WORKDIR [--remount-ro DATA_DIR]
          --seccomp FD --chdir WORKDIR -- COMMAND…

no network (its own empty loopback), its own processes, the filesystem read-only but for
the working folder, an empty /tmp, no device but the harmless ones (null, zero, random,
a terminal), no Unix socket, and a memory cap. `--cap-drop ALL` matters when Hilo runs
as root: a root process keeps its capabilities inside and could remount / read-write.
/run is emptied and read-only, and the seccomp filter (`unix_socket_filter`) refuses
socket(AF_UNIX) — a read-only mount does not stop a connection to a Unix socket, and
one in the working folder would be reachable (Docker's, D-Bus's, an agent's run
anything they are asked) — and io_uring, whose operations open sockets past seccomp.
Hilo's data directory and config file are hidden (the memory, the server's token); the
working folder may lie inside the data directory (the default one does: `[tools]
terminal_workdir`), bound after the data directory is hidden.

Limits: `prlimit` (util-linux) caps the address space of every process at `[tools]
terminal_memory_mb` and its CPU time at the command's timeout; the writable tmpfs
(/tmp, /dev/shm) are capped at the same size, since what they hold is memory too.

Where bwrap or prlimit is missing or cannot start (no user namespaces, a bwrap older
than 0.6, a machine whose seccomp numbers are not known here), the terminal is off and
says why in one line; `terminal_sandbox = "none"` is the owner's explicit choice to run
commands as they are.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import platform
import re
import shutil
import struct
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.config import Config
from app.errors import Unavailable
from app.log import get_logger
from app.sanitize import secret_kind
from app.turn.tools.registry import ToolFailed

__all__ = ["log", "SECRET_NAME", "SECRET_VALUE", "BASE_ENVIRONMENT", "scrubbed_environment",
           "AF_UNIX", "IO_URING_SETUP", "UnknownMachine", "unix_socket_filter", "filter_fd",
           "Sandbox", "sandbox_for"]

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
_PROBE_MEMORY_BYTES = 256 * 1024 * 1024


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


# -- the seccomp filter ---------------------------------------------------------------------------

# A classic BPF program over `struct seccomp_data` {int nr; u32 arch; u64 ip; u64 args[6]},
# built by hand: it is ten instructions, and the Python bindings of libseccomp are not on
# PyPI in a maintained form. Each instruction is `struct sock_filter` {u16 code; u8 jt;
# u8 jf; u32 k}, jt and jf counting the instructions to skip.
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_IF_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_IF_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K
_ARCH_AT, _NR_AT, _FIRST_ARGUMENT_AT = 4, 0, 16  # the low word of args[0] (little-endian)
_ALLOW, _KILL = 0x7FFF0000, 0x80000000  # SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS
_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO | errno
AF_UNIX = 1
IO_URING_SETUP = 425  # the same number on every architecture below


@dataclass(frozen=True)
class _Machine:
    audit_arch: int  # AUDIT_ARCH_*: a syscall made in another ABI is killed
    socket: int  # __NR_socket
    x32: bool = False  # x86-64's x32 ABI: numbers from 0x40000000, killed too


_MACHINES = {
    "x86_64": _Machine(0xC000003E, 41, x32=True),
    "aarch64": _Machine(0xC00000B7, 198),
    "riscv64": _Machine(0xC00000F3, 198),
}
_MACHINE_NAMES = {"amd64": "x86_64", "arm64": "aarch64"}


class UnknownMachine(Unavailable):
    """No seccomp filter is known for this machine's architecture."""


def unix_socket_filter(machine: str | None = None) -> bytes:
    """The seccomp program bubblewrap loads (`--seccomp FD`): socket(AF_UNIX, …) fails
    with EACCES (a program falls back as when a socket is refused: nss, syslog), so does
    io_uring_setup (ENOSYS), a syscall of another ABI kills the process, anything else
    runs. UnknownMachine for an architecture not in _MACHINES."""
    name = (machine or platform.machine()).lower()
    found = _MACHINES.get(_MACHINE_NAMES.get(name, name))
    if found is None:
        raise UnknownMachine(f"no seccomp filter is known for {name} machines")
    program: list[tuple[int, int | str, int | str, int]] = [
        (_LOAD_WORD, 0, 0, _ARCH_AT),
        (_JUMP_IF_EQUAL, 0, "kill", found.audit_arch),
        (_LOAD_WORD, 0, 0, _NR_AT),
        *([(_JUMP_IF_AT_LEAST, "kill", 0, 0x40000000)] if found.x32 else []),
        (_JUMP_IF_EQUAL, "enosys", 0, IO_URING_SETUP),
        (_JUMP_IF_EQUAL, 0, "allow", found.socket),
        (_LOAD_WORD, 0, 0, _FIRST_ARGUMENT_AT),
        (_JUMP_IF_EQUAL, "eacces", "allow", AF_UNIX),
    ]
    returns = {"allow": _ALLOW, "eacces": _ERRNO | errno.EACCES,
               "enosys": _ERRNO | errno.ENOSYS, "kill": _KILL}
    at = {label: len(program) + index for index, label in enumerate(returns)}
    code = b""
    for index, (op, jump_true, jump_false, k) in enumerate(program):
        def skip(target: int | str, index: int = index) -> int:
            return target if isinstance(target, int) else at[target] - index - 1
        code += struct.pack("=HBBI", op, skip(jump_true), skip(jump_false), k)
    return code + b"".join(struct.pack("=HBBI", _RETURN, 0, 0, k) for k in returns.values())


@contextmanager
def filter_fd(program: bytes) -> Iterator[int]:
    """A pipe's read end holding `program`, for bwrap to read (`--seccomp FD`, passed
    to the process with pass_fds); closed here when the block ends."""
    read, write = os.pipe()
    try:
        os.write(write, program)  # a few hundred bytes: the pipe holds them all
        os.close(write)
        yield read
    finally:
        os.close(read)


# -- the sandbox ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sandbox:
    """bubblewrap under prlimit, what it hides besides the defaults, and the memory cap."""

    bwrap: str
    prlimit: str
    seccomp: bytes  # unix_socket_filter()
    memory_bytes: int
    hidden_folders: tuple[Path, ...] = ()
    hidden_files: tuple[Path, ...] = ()

    def argv(self, command: list[str], workdir: Path, seccomp_fd: int,
             seconds: float) -> list[str]:
        """`command` as run inside the sandbox, with `workdir` its one writable folder,
        the filter read from `seccomp_fd`, and `seconds` of CPU time."""
        folder, memory = str(workdir), str(self.memory_bytes)
        argv = [self.prlimit, f"--as={memory}", f"--cpu={max(1, math.ceil(seconds))}", "--",
                self.bwrap, "--die-with-parent", "--new-session", "--unshare-net",
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--unshare-user-try", "--cap-drop", "ALL", "--ro-bind", "/", "/",
                "--dev", "/dev", "--size", memory, "--tmpfs", "/dev/shm",
                "--remount-ro", "/dev", "--proc", "/proc",
                "--size", memory, "--tmpfs", "/tmp", "--tmpfs", "/run", "--remount-ro", "/run"]
        # A hidden folder holding the working folder is emptied before the bind (which
        # then shows the working folder in it), any other after it (the working folder
        # may hold it); the working folder itself, the owner's choice, is not hidden.
        holding = [f for f in self.hidden_folders if _within(workdir, f) and f != workdir]
        others = [f for f in self.hidden_folders if not _within(workdir, f)]
        for path in holding:
            argv += ["--tmpfs", str(path)]
        argv += ["--bind", folder, folder]
        for path in others:
            argv += ["--tmpfs", str(path)]
        for path in self.hidden_files:
            if not any(_within(path, f) for f in self.hidden_folders):
                argv += ["--ro-bind", "/dev/null", str(path)]
        for path in [*holding, *others]:
            argv += ["--remount-ro", str(path)]
        return [*argv, "--seccomp", str(seccomp_fd), "--chdir", folder, "--", *command]

    def hides(self, path: Path, workdir: Path) -> bool:
        """Whether a command run in `workdir` cannot see `path` (the sandbox replaces
        what holds it)."""
        return not _within(path, workdir) and any(
            _within(path, folder) for folder in (Path("/tmp"), Path("/run"),
                                                 *self.hidden_folders))


def sandbox_for(config: Config) -> Sandbox | None:
    """The sandbox `[tools] terminal_sandbox` asks for (None: "none", the owner's choice);
    ToolFailed, in one line, when bubblewrap or prlimit is missing or cannot start here."""
    if config.tools.terminal_sandbox == "none":
        return None
    bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
    if bwrap is None:
        raise ToolFailed(_off("bubblewrap (bwrap) is not installed"))
    if prlimit is None:
        raise ToolFailed(_off("prlimit, which sets its limits, is not installed", "util-linux"))
    try:
        seccomp = unix_socket_filter()
    except UnknownMachine as exc:
        raise ToolFailed(_off(str(exc))) from None
    failure = _start_failure(bwrap, prlimit)
    if failure is not None:
        raise ToolFailed(_off(f"bubblewrap cannot start here ({failure})"))
    folders = tuple(p.resolve() for p in [config.data_dir] if p.is_dir())
    files = tuple(p.resolve() for p in [config.origin.file] if p is not None and p.is_file())
    return Sandbox(bwrap, prlimit, seccomp, config.tools.terminal_memory_mb * 1024 * 1024,
                   folders, files)


def _off(why: str, package: str = "bubblewrap") -> str:
    return (f"the terminal is off: {why}, and it runs commands only in that sandbox; "
            f"install it (apt-get install {package}) or set [tools] terminal_sandbox = "
            '"none" to run commands unsandboxed')


@functools.lru_cache(maxsize=8)
def _start_failure(bwrap: str, prlimit: str) -> str | None:
    """Why bwrap cannot run a command with our flags here, or None; asked once per
    process (a failure is logged once too)."""
    sandbox = Sandbox(bwrap, prlimit, unix_socket_filter(), _PROBE_MEMORY_BYTES)
    try:
        with filter_fd(sandbox.seccomp) as fd:
            probe = sandbox.argv(["/bin/true"], Path("/"), fd, _PROBE_TIMEOUT_SECONDS)
            done = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=_PROBE_TIMEOUT_SECONDS, check=False, pass_fds=(fd,))
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
