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

Options are read as the programs read them, or refused when that is unsure: a long
option may be abbreviated to any prefix that names one option (getopt_long, git's
parse-options, argparse and Getopt::Long all take `--checkpoint-act` for tar's
`--checkpoint-action`, `--upload-pa` for git's `--upload-pack`), so a prefix of a
refused option is refused, even one that could name another option too; one-letter
options may be clustered (`-xI`, and tar's first word `xIf` without its dash), so a
refused letter anywhere in a cluster is refused, even where it would be a value; and
words after `--` are operands, not options.
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

__all__ = ["ANY_FURTHER", "PATH_IN_WORKDIR", "PLACEHOLDERS", "has_metacharacters", "plain_words",
           "InvalidRule", "AllowRule", "matching_rule", "rule_to_store", "refusal", "inside",
           "long_option", "abbreviates", "short_letters", "option_words"]

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
    elif re.fullmatch(r"-[A-Za-z].+", word):
        # A value attached to a letter of a cluster: -f/etc/x, -xf~/.ssh/key, -xf../x.
        # Which letter takes it depends on the program: each place a path could start.
        candidates += [word[at:] for at in range(2, len(word))
                       if word[at] in "/~" or word.startswith("..", at)]
    return any(c and c != "-" and not inside(c, workdir) for c in candidates)


# -- reading options as getopt does --------------------------------------------------------------


def long_option(word: str) -> str | None:
    """The option a word names when it is a long one (`--name` of `--name=value`)."""
    if not word.startswith("--") or word == "--":
        return None
    return word.split("=", 1)[0]


def abbreviates(name: str, option: str) -> bool:
    """Whether a long option as typed, `name`, may stand for `option`: the whole of it, or
    a prefix (what getopt_long takes when no other option shares it; refused here
    even when one does, since which one the program reads is then unsure)."""
    return len(name) > 2 and option.startswith(name)


def _naming(typed: str, option: str) -> str:
    """An option as a refusal names it: as typed, and what it stands for if abbreviated."""
    return typed if typed == option else f"{typed} (for {option})"


def short_letters(word: str) -> str:
    """The letters of a cluster of one-letter options (`-xvf` → "xvf"), else ""."""
    if len(word) < 2 or word[0] != "-" or word[1] == "-":
        return ""
    return word[1:]


def option_words(args: Sequence[str]) -> list[str]:
    """The words that may be options: all before a `--` (getopt reads options after
    operands too, unless POSIXLY_CORRECT)."""
    return list(args[:args.index("--")]) if "--" in args else list(args)


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
            inline = next((o for o in _INLINE_CODE_LONG if abbreviates(name, o)), None)
            if inline is not None:
                return f"{program} {_naming(name, inline)} runs the code it is given"
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
    """The refused global option this word is (`-c`, `-Cdir`, `--git-dir=x`, `--git-d`,
    `-pc`), if any."""
    name = long_option(option)
    for refused in _GIT_GLOBAL:
        if name is not None and (abbreviates(name, refused) or name == refused):
            return refused
        if len(refused) == 2 and refused[1] in short_letters(option):
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
    if any(arg.startswith(("alias.", "ext::")) for arg in args):
        return "git aliases and ext:: remotes run commands"
    for arg in option_words(args[index + 1:]):
        name = long_option(arg)
        # `--output-directory` starts with a refused name; `--upload-pa` abbreviates one.
        refused = name and next((o for o in _GIT_LONG
                                 if name.startswith(o) or abbreviates(name, o)), None)
        if refused:
            return f"git {_naming(name, refused)} can write files or run commands"
        letter = next((letter for letter in short_letters(arg)
                       if subcommand in _GIT_SHORT.get(f"-{letter}", ())), None)
        if letter is not None:
            return f"git {subcommand} -{letter} can write files or run commands"
    return None


_AWK_DANGER = re.compile(r"\bsystem\s*\(|getline|[|>]|@load")


def _awk(program: str, args: list[str]) -> str | None:
    for arg in args:
        name = long_option(arg)
        if "l" in short_letters(arg) or (name is not None and abbreviates(name, "--load")):
            return f"{program} -l loads code"
        if _AWK_DANGER.search(arg):
            return (f"{program}'s system, getline, pipes and redirections run commands or "
                    "write files")
    return None


# sed's s and y commands, whose text may hold any letter; and /regex/ addresses.
_SED_BODIES = re.compile(r"[sy]([^\\\n])(?:\\.|(?!\1)[^\\\n])*\1(?:\\.|(?!\1)[^\\\n])*\1"
                         r"|/(?:\\.|[^/\\\n])*/")
_SED_COMMANDS_THAT_ACT = re.compile(r"[ewWrR]")
# GNU sed's long options (getopt_long: any unambiguous prefix stands for one), and
# those that take the next word as their value when no `=` gives it.
_SED_LONG = ("--expression", "--file", "--line-length", "--in-place", "--null-data",
             "--zero-terminated", "--posix", "--quiet", "--silent", "--regexp-extended",
             "--separate", "--sandbox", "--unbuffered", "--debug", "--follow-symlinks",
             "--binary", "--help", "--version")
_SED_LONG_VALUES = ("--expression", "--file", "--line-length")
_SED_SHORT_VALUES = "efl"  # the rest of the word, or the next word; -i takes only the rest


def _sed_long(name: str) -> str | None:
    """The sed option a typed long option names: exactly, or as its one prefix."""
    if name in _SED_LONG:
        return name
    found = [option for option in _SED_LONG if abbreviates(name, option)]
    return found[0] if len(found) == 1 else None


def _sed(program: str, args: list[str]) -> str | None:
    scripts: list[str] = []
    operands: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            operands += args[index:]
            break
        name = long_option(arg)
        if name is not None:
            option = _sed_long(name)
            if option is None:
                return f"sed {name} names no sed option, or more than one"
            value = arg.split("=", 1)[1] if "=" in arg else None
            if value is None and option in _SED_LONG_VALUES:
                value, index = (args[index] if index < len(args) else ""), index + 1
            if option == "--file":
                return "sed -f runs a script this rule cannot read"
            if option == "--expression":
                scripts.append(value or "")
        elif short_letters(arg):
            for at, letter in enumerate(arg[1:], start=2):  # a cluster: -n, -ne, -nf, -i.bak
                if letter == "i":
                    break  # the rest of the word is its suffix
                if letter in _SED_SHORT_VALUES:
                    value = arg[at:]
                    if not value:
                        value, index = (args[index] if index < len(args) else ""), index + 1
                    if letter == "f":
                        return "sed -f runs a script this rule cannot read"
                    if letter == "e":
                        scripts.append(value)
                    break
        else:
            operands.append(arg)
    if not scripts and operands:
        scripts.append(operands[0])
    for script in scripts:
        if _SED_COMMANDS_THAT_ACT.search(_SED_BODIES.sub("", script)):
            return "sed's e, w and r commands run commands or touch other files"
    return None


def _refused_options(*options: str, reason: str, initial_commands: bool = False,
                     known: tuple[str, ...] = (), old_style: bool = False):
    """A check refusing these options as the program reads them (module docstring): a
    long one whole, with `=value`, or abbreviated — unless the word is one of the
    program's `known` harmless options (exact names win over prefixes); a one-letter one
    anywhere in a cluster (`-vo ProxyCommand=…`), with `old_style` in a first word
    without its dash too (tar's `xIf`); one of several letters (zip's `-TT`) at the start
    of a word; and with `initial_commands` any `+command` word (less, more)."""
    long = [o for o in options if o.startswith("--")]
    letters = {o[1] for o in options if len(o) == 2 and o[0] == "-" and o[1] != "-"}
    several = [o for o in options if not o.startswith("--") and len(o) > 2]

    def check(program: str, args: list[str]) -> str | None:
        for at, arg in enumerate(option_words(args)):
            if initial_commands and arg.startswith("+"):
                return f"{program} {arg.split('=', 1)[0]} {reason}"
            name = long_option(arg)
            if name is not None:
                refused = None if name in known else next(
                    (o for o in long if abbreviates(name, o)), None)
                if refused is not None:
                    return f"{program} {_naming(name, refused)} {reason}"
                continue
            attached = next((o for o in several if arg.startswith(o)), None)
            if attached is not None:
                return f"{program} {attached} {reason}"
            cluster = short_letters(arg) or (arg if old_style and at == 0 else "")
            letter = next((letter for letter in cluster if letter in letters), None)
            if letter is not None:
                return f"{program} -{letter} {reason}"
        return None
    return check


def _fetcher(*options: str):
    """curl's or wget's check: file: URLs, and the options that read a configuration
    or run a command (as _refused_options reads them)."""
    refused = _refused_options(*options, reason="reads or runs commands from elsewhere")

    def check(program: str, args: list[str]) -> str | None:
        if any("file:" in arg.lower() for arg in args):
            return f"{program} file: URLs read local files"
        return refused(program, args)
    return check


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
                            "--rsh-command", "--rmt-command", reason="runs another command",
                            known=("--checkpoint",), old_style=True),
    "rsync": _refused_options("-e", "--rsh", "--rsync-path", reason="runs another command"),
    "zip": _refused_options("-TT", "--unzip-command", reason="runs another command"),
    "less": _refused_options("--log-file", "-o", "-O", reason="runs commands or writes files",
                             initial_commands=True),
    "more": _refused_options(reason="runs commands", initial_commands=True),
    "man": _refused_options("-P", "--pager", "-H", "--html", reason="runs another program"),
    "curl": _fetcher("-K", "--config"),
    "wget": _fetcher("-e", "--execute", "--use-askpass", "--config"),
    "sort": _refused_options("--compress-program", reason="runs another program"),
    "make": _refused_options("--eval", "-E", reason="runs the code it is given"),
    **{name: _refused_options("-o", "-F", "-S", "-J", reason="can run a local command")
       for name in ("ssh", "scp", "sftp")},
}
