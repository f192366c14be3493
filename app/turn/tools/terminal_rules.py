"""What the terminal may run without asking: allow rules, and the options no rule covers.

An allow rule is a command line a person can read, word by word (quoted as a shell
quotes):

    git status            exactly `git status`, nothing more
    ls *                  `ls` and any further arguments (`*` only as the last word)
    cat <path>            `cat` and one path inside the working folder
    git diff <path> *     a path, then any further arguments

Every other word is literal. A rule's first word is a program, never a placeholder.
"Allow always" stores the command approved, whole (an exact rule). A prefix from
before (`[tools] terminal_allowed_prefixes`, and the stored ones migrated in 0014) is
the rule "PREFIX *": it covers what it named, word by word, as it did.

Whatever a rule says, a command is covered only when it has no shell metacharacter and
`refusal` finds nothing in it: options that run another command, write where the rule
did not say, or read outside the working folder (`find -exec`, `git -c`, `env`,
`sh -c`, `python -c`, `xargs`, awk's `system`, `cat /etc/shadow`, …). Such a command
runs only when a person approves that very call.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.config import SHELL_METACHARACTERS
from app.errors import InvalidInput

ANY_FURTHER = "*"
PATH_IN_WORKDIR = "<path>"
PLACEHOLDERS = (ANY_FURTHER, PATH_IN_WORKDIR)


def has_metacharacters(command: str) -> bool:
    return SHELL_METACHARACTERS.search(command) is not None


def plain_words(command: str) -> list[str] | None:
    """The command's words, or None when it holds a shell metacharacter or does not
    split (an unclosed quote): such a command is never covered by a rule."""
    if has_metacharacters(command):
        return None
    try:
        return shlex.split(command)
    except ValueError:
        return None


# -- allow rules --------------------------------------------------------------------------------


class InvalidRule(InvalidInput, ValueError):
    """A rule that does not read as one; the message says why."""


@dataclass(frozen=True)
class AllowRule:
    """One allow rule: its words, and whether it ends in "any further arguments"."""

    text: str
    words: tuple[str, ...]
    any_further: bool

    @classmethod
    def parse(cls, text: str) -> AllowRule:
        """The rule `text` states; InvalidRule saying what is wrong with it."""
        text = text.strip()
        if not text.isprintable():
            raise InvalidRule(f"{text!r} cannot be allowed: a rule is one line of plain words")
        try:
            words = shlex.split(text)
        except ValueError:
            raise InvalidRule(f"{text!r} cannot be allowed: check its quotes") from None
        literal = [w for w in words if w not in PLACEHOLDERS]
        if any(has_metacharacters(w) for w in literal):
            raise InvalidRule(f"{text!r} cannot be allowed: a rule is plain words, without "
                              "shell characters (; & | ` $ < > ( ) \\)")
        if not words or words[0] in PLACEHOLDERS:
            raise InvalidRule(f"{text!r} cannot be allowed: a rule starts with its program")
        if ANY_FURTHER in words[:-1]:
            raise InvalidRule(f"{text!r} cannot be allowed: `*` stands only as the last word")
        any_further = words[-1] == ANY_FURTHER
        return cls(_join(words), tuple(words[:-1] if any_further else words), any_further)

    @classmethod
    def from_prefix(cls, prefix: str) -> AllowRule:
        """A prefix from before rules: it covers commands that start with its words."""
        return cls.parse(f"{prefix.strip()} {ANY_FURTHER}")

    def covers(self, words: Sequence[str], workdir: Path) -> bool:
        """Whether the rule's words match the command's, placeholders included (the
        refusals are not its business: `matching_rule` asks them)."""
        if len(words) < len(self.words):
            return False
        if not self.any_further and len(words) != len(self.words):
            return False
        for wanted, word in zip(self.words, words, strict=False):
            if wanted == PATH_IN_WORKDIR:
                if word.startswith("-") or not inside(word, workdir):
                    return False
            elif wanted != word:
                return False
        return True


def matching_rule(command: str, rules: Sequence[AllowRule], workdir: Path) -> AllowRule | None:
    """The first rule that covers the command; None when none does, or the command has a
    shell metacharacter or something `refusal` refuses."""
    words = plain_words(command)
    if not words or refusal(words, workdir) is not None:
        return None
    return next((rule for rule in rules if rule.covers(words, workdir)), None)


def rule_to_store(command: str, workdir: Path) -> str | None:
    """What "allow always" stores for a command: the command itself, exactly. None when
    it cannot be allowed always (shell characters, a refused option, a word that would
    read back as a placeholder)."""
    words = plain_words(command)
    if (not words or refusal(words, workdir) is not None
            or any(w in PLACEHOLDERS for w in words)):
        return None
    return _join(words)


def _join(words: Sequence[str]) -> str:
    """Words as a rule writes them: quoted as a shell would need, placeholders bare."""
    return " ".join(w if w in PLACEHOLDERS else shlex.quote(w) for w in words)


# -- what no rule covers ------------------------------------------------------------------------


def refusal(words: Sequence[str], workdir: Path) -> str | None:
    """Why no rule (nor a trusted task) may run these words, or None: the first
    dangerous option, program or path found."""
    if not words:
        return None
    program = _program(words[0])
    args = list(words[1:])
    check = _CHECKS.get(program)
    reason = check(program, args) if check else None
    if reason is None and program in _FILE_PROGRAMS:
        outside = next((w for w in args if _reaches_outside(w, workdir)), None)
        if outside is not None:
            reason = f"{outside} is outside the working folder"
    return reason


def inside(word: str, workdir: Path) -> bool:
    """Whether a path (relative to the working folder, or absolute) resolves, symbolic
    links followed, inside the working folder."""
    path = Path(os.path.expanduser(word))
    full = os.path.realpath(path if path.is_absolute() else workdir / path)
    root = os.path.realpath(workdir)
    return full == root or full.startswith(root.rstrip(os.sep) + os.sep)


def _program(word: str) -> str:
    name = os.path.basename(word)
    if re.fullmatch(r"(python|pypy)[0-9.]*", name):
        return "python"
    return name


def _reaches_outside(word: str, workdir: Path) -> bool:
    """Whether a word names, or carries as an option's value, a path outside the folder."""
    candidates = []
    if not word.startswith("-"):
        candidates.append(word.lstrip("@"))  # curl's @file
    if "=" in word:
        candidates.append(word.split("=", 1)[1])  # --file=/x, dd's if=/x
    elif re.fullmatch(r"-[A-Za-z].+", word) and ("/" in word or "~" in word):
        candidates.append(word[2:])  # -f/etc/x
    return any(c and c != "-" and not inside(c, workdir) for c in candidates)


# Programs that read or write the files they name: a path outside the working folder
# (as an argument, or an option's value) is refused. The sandbox stops writes there, not
# reads; with terminal_sandbox = "none" it stops neither.
_FILE_PROGRAMS = frozenset("""
    cat tac head tail less more nl wc od xxd hexdump strings grep egrep fgrep rg ag sort
    uniq cut paste diff cmp comm join fold fmt column md5sum sha1sum sha224sum sha256sum
    sha384sum sha512sum b2sum cksum base64 base32 file stat ls tree du find cp mv ln tar
    zip unzip gzip gunzip zcat bzcat xzcat bzip2 xz jq yq awk gawk mawk nawk sed curl
    wget dd rsync scp git rm rmdir mkdir touch tee truncate shred chmod chown chgrp
    install
""".split())

_RUNS_A_COMMAND = frozenset("""
    env xargs nohup timeout nice ionice stdbuf setsid sudo su doas pkexec runuser chroot
    unshare nsenter bwrap firejail strace ltrace gdb watch time flock parallel script
    busybox exec eval command builtin chrt taskset systemd-run at batch
""".split())
_SHELLS = frozenset("sh bash zsh dash ksh mksh ash fish csh tcsh".split())
_EDITORS = frozenset("vi vim nvim ex view rvim emacs".split())


def _runs_a_command(program: str, args: list[str]) -> str | None:
    return f"{program} runs another command"


def _shell(program: str, args: list[str]) -> str | None:
    return f"{program} runs whatever it is given"


def _editor(program: str, args: list[str]) -> str | None:
    return f"{program} can run any command"


# The option (in a cluster of one-letter options too: `-Ic`, `-ne`) that runs the code
# given on the command line; and the options that take the next word as their value.
_INLINE_CODE = {"python": "c", "perl": "eE", "ruby": "e", "lua": "e", "luajit": "e",
                "php": "r", "Rscript": "e", "node": "ep", "nodejs": "ep", "bun": "ep"}
_INLINE_CODE_LONG = ("--eval", "--print", "--command")
_NODE_VALUES = ("-r", "--require", "--import", "--loader", "-C", "--conditions")
_TAKES_A_VALUE = {"python": ("-W", "-X"), "ruby": ("-I", "-r", "-C"), "perl": ("-I", "-M"),
                  "node": _NODE_VALUES, "nodejs": _NODE_VALUES, "bun": _NODE_VALUES,
                  "php": ("-d", "-c", "-z"), "lua": ("-l",), "luajit": ("-l",)}


def _interpreter(program: str, args: list[str]) -> str | None:
    """Inline code among the interpreter's own options: those before its script (the
    words after the script are the script's)."""
    letters = _INLINE_CODE[program]
    takes_a_value = _TAKES_A_VALUE.get(program, ())
    index = 0
    while index < len(args) and args[index].startswith("-") and args[index] not in ("-", "--"):
        option = args[index]
        name = option.split("=", 1)[0]
        if option.startswith("--"):
            if name in _INLINE_CODE_LONG:
                return f"{program} {name} runs the code it is given"
        elif any(letter in option[1:] for letter in letters):
            return f"{program} -{letters[0]} runs the code it is given"
        if option in takes_a_value:
            index += 1  # its value, not the script
        index += 1
    return None


_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint",
                           "-fprint0", "-fprintf", "-fls"})


def _find(program: str, args: list[str]) -> str | None:
    action = next((a for a in args if a in _FIND_ACTIONS), None)
    if action is None:
        return None
    if action == "-delete":
        return "find -delete deletes files"
    if action.startswith("-f"):
        return f"find {action} writes a file"
    return f"find {action} runs another command"


# git's own options before its subcommand that change which configuration, repository
# or programs it uses; any of them can make it run a command.
_GIT_GLOBAL = ("-c", "-C", "--config-env", "--exec-path", "--git-dir", "--work-tree",
               "--namespace", "--super-prefix", "--list-cmds")
_GIT_SUBCOMMANDS = frozenset("""
    config submodule bisect filter-branch difftool mergetool daemon instaweb credential
    upload-pack receive-pack shell hook send-email web--browse archimport cvsimport
    cvsserver cvsexportcommit p4 svn quiltimport request-pull
""".split())
_GIT_LONG = ("--output", "--upload-pack", "--receive-pack", "--exec", "--extcmd",
             "--ext-diff", "--open-files-in-pager", "--config", "--template", "--tool")
_GIT_SHORT = {"-o": ("archive", "format-patch"), "-u": ("clone", "fetch", "pull", "ls-remote",
                                                        "archive"),
              "-x": ("rebase", "difftool"), "-O": ("grep",), "-c": ("clone",)}


def _git_global(option: str) -> str | None:
    """The refused global option this word is (`-c`, `-Cdir`, `--git-dir=x`), if any."""
    name = option.split("=", 1)[0]
    for refused in _GIT_GLOBAL:
        if name == refused or (len(refused) == 2 and option.startswith(refused)):
            return refused
    return None


def _git(program: str, args: list[str]) -> str | None:
    index = 0
    while index < len(args) and args[index].startswith("-"):
        refused = _git_global(args[index])
        if refused is not None:
            return f"git {refused} changes git's configuration or repository"
        index += 1
    subcommand = args[index] if index < len(args) else ""
    if subcommand in _GIT_SUBCOMMANDS or subcommand.startswith("credential-"):
        return f"git {subcommand} can change configuration or run commands"
    for arg in args[index + 1:]:
        name = arg.split("=", 1)[0]
        if any(name.startswith(option) for option in _GIT_LONG):
            return f"git {name} can write files or run commands"
        if arg[:2] in _GIT_SHORT and subcommand in _GIT_SHORT[arg[:2]]:
            return f"git {subcommand} {arg[:2]} can write files or run commands"
        if arg.startswith(("alias.", "ext::")):
            return "git aliases and ext:: remotes run commands"
    return None


_AWK_DANGER = re.compile(r"\bsystem\s*\(|getline|[|>]|@load")


def _awk(program: str, args: list[str]) -> str | None:
    for arg in args:
        if arg.startswith("-l") or arg == "--load" or arg.startswith("--load="):
            return f"{program} -l loads code"
        if _AWK_DANGER.search(arg):
            return (f"{program}'s system, getline, pipes and redirections run commands or "
                    "write files")
    return None


# sed's s and y commands, whose text may hold any letter; and /regex/ addresses.
_SED_BODIES = re.compile(r"[sy]([^\\\n])(?:\\.|(?!\1)[^\\\n])*\1(?:\\.|(?!\1)[^\\\n])*\1"
                         r"|/(?:\\.|[^/\\\n])*/")
_SED_COMMANDS_THAT_ACT = re.compile(r"[ewWrR]")


def _sed(program: str, args: list[str]) -> str | None:
    scripts: list[str] = []
    operands: list[str] = []
    words = iter(args)
    for arg in words:
        if arg == "--expression" or arg.startswith("--expression="):
            scripts.append(arg.split("=", 1)[1] if "=" in arg else next(words, ""))
        elif arg == "--file" or arg.startswith("--file="):
            return "sed -f runs a script this rule cannot read"
        elif arg.startswith("-") and not arg.startswith("--") and arg != "-":
            for at, letter in enumerate(arg[1:], start=2):  # a cluster: -n, -ne, -nf
                if letter == "f":
                    return "sed -f runs a script this rule cannot read"
                if letter == "e":
                    scripts.append(arg[at:] or next(words, ""))
                    break
        elif not arg.startswith("-"):
            operands.append(arg)
    if not scripts and operands:
        scripts.append(operands[0])
    for script in scripts:
        if _SED_COMMANDS_THAT_ACT.search(_SED_BODIES.sub("", script)):
            return "sed's e, w and r commands run commands or touch other files"
    return None


def _refused_options(*options: str, reason: str, initial_commands: bool = False):
    """A check refusing these options (alone, `--option=value`, or a one-letter one with
    its value attached: `-oProxyCommand=…`), and with `initial_commands` any `+command`
    word (less, more)."""
    def check(program: str, args: list[str]) -> str | None:
        for arg in args:
            name = arg.split("=", 1)[0]
            if name in options or (initial_commands and arg.startswith("+")):
                return f"{program} {name} {reason}"
            attached = next((o for o in options if len(o) == 2 and arg.startswith(o)), None)
            if attached is not None:
                return f"{program} {attached} {reason}"
        return None
    return check


def _fetcher(program: str, args: list[str]) -> str | None:
    for arg in args:
        if "file:" in arg.lower():
            return f"{program} file: URLs read local files"
        name = arg.split("=", 1)[0]
        if name in ("-K", "--config", "-e", "--execute", "--use-askpass"):
            return f"{program} {name} reads or runs commands from elsewhere"
    return None


_CHECKS = {
    **{name: _runs_a_command for name in _RUNS_A_COMMAND},
    **{name: _shell for name in _SHELLS},
    **{name: _editor for name in _EDITORS},
    **{name: _interpreter for name in _INLINE_CODE},
    "find": _find,
    "git": _git,
    **{name: _awk for name in ("awk", "gawk", "mawk", "nawk")},
    "sed": _sed,
    "tar": _refused_options("--to-command", "--checkpoint-action", "--use-compress-program",
                            "-I", "--info-script", "--new-volume-script", "-F",
                            "--rsh-command", "--rmt-command", reason="runs another command"),
    "rsync": _refused_options("-e", "--rsh", "--rsync-path", reason="runs another command"),
    "zip": _refused_options("-TT", "--unzip-command", reason="runs another command"),
    "less": _refused_options("--log-file", "-o", "-O", reason="runs commands or writes files",
                             initial_commands=True),
    "more": _refused_options(reason="runs commands", initial_commands=True),
    "man": _refused_options("-P", "--pager", "-H", "--html", reason="runs another program"),
    "curl": _fetcher,
    "wget": _fetcher,
    "sort": _refused_options("--compress-program", reason="runs another program"),
    "make": _refused_options("--eval", "-E", reason="runs the code it is given"),
    **{name: _refused_options("-o", "-F", "-S", "-J", reason="can run a local command")
       for name in ("ssh", "scp", "sftp")},
}
