"""Configuration: read once at start into a typed, read-only object.

Sources, later wins: the defaults below, a config file, then `HILO_<SECTION>_<KEY>`
environment variables (e.g. `HILO_LLM_URL`, `HILO_MEMORY_WINDOW_EVENTS`,
`HILO_DATA_DIR`). Every invalid value (a wrong type, an unknown key, an out-of-range
number, a URL that is not one) stops the program with one line naming the key, its
source and what is allowed.

The file is the first of: `--config` or `HILO_CONFIG`, `./config.toml`, the user's
config folder (`$XDG_CONFIG_HOME/hilo/config.toml`, else `~/.config/hilo/config.toml`);
with none, the defaults. `Config.origin` records which file and where the data
directory came from, for `hilo doctor` to say.

The defaults here and the repository's `config.toml` are kept identical by a test, so
the file documents every key and the program still runs without it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app.errors import Misconfigured

__all__ = ["ENV_PREFIX", "ENV_CONTROL", "OLLAMA_PORT", "LOCAL_ZONE", "ConfigError", "ReadOnly",
           "Allowed", "between", "one_of", "NON_EMPTY", "NO_CONTROL_CHARACTERS", "HEADER_NAME",
           "setting", "model_server_url", "optional_server_url", "redis_url", "KEEP_ALIVE",
           "TIMEZONE", "system_timezone", "DataConfig", "MemoryConfig", "ImportanceConfig",
           "LLMConfig", "EmbedderConfig", "QueueConfig", "WriterConfig", "OPEN_WEBUI_HOUSEKEEPING",
           "LearnConfig", "ServerConfig", "ScheduleConfig", "LoggingConfig", "ConfigOrigin", "NotifyConfig",
           "SHELL_METACHARACTERS", "ToolsConfig", "Config", "with_option", "SECTIONS",
           "user_config_path", "find_config_file", "load_config"]

ENV_PREFIX = "HILO_"
# Variables that select the configuration itself rather than a key in it.
ENV_CONTROL = {"HILO_CONFIG"}
# Ollama's own port: a bare host in [llm] url gets it, as OLLAMA_HOST does.
OLLAMA_PORT = 11434
# [schedule] timezone's value for "this machine's zone".
LOCAL_ZONE = "local"


class ConfigError(Misconfigured, ValueError):
    """A configuration value the program cannot run with; str() is one line."""


class ReadOnly:
    """A record whose fields are set once, by __init__; `Config.replace` makes changed copies.

    What `frozen=True` does, but that compiles three more methods for each class here:
    ~4 ms of every `hilo` command's start-up, which a CLI command's 100 ms cannot spare.
    Unhashable, like any non-frozen dataclass that compares by value.
    """

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        fields = self.__dataclass_fields__  # type: ignore[attr-defined]
        if name in self.__dict__ or name not in fields:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


@dataclass
class Allowed(ReadOnly):
    """What a key accepts, checked after parsing; `describe` goes in the error."""

    check: Callable[[Any], bool]
    describe: str


def between(low: float, high: float) -> Allowed:
    return Allowed(lambda v: low <= v <= high, f"a number from {low:g} to {high:g}")


def one_of(*choices: str) -> Allowed:
    return Allowed(lambda v: v in choices, "one of " + ", ".join(repr(c) for c in choices))


def _is_timezone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


# Messages as short and plain as any: a pattern that matches the empty one, or all of
# these, matches every message.
_ANY_MESSAGES = ("hi", "7", "?")


def _are_patterns(values: tuple[str, ...]) -> bool:
    try:
        for value in values:
            re.compile(value)
    except re.error:
        return False
    return True


def _are_housekeeping_patterns(values: tuple[str, ...]) -> bool:
    """Regular expressions none of which matches every message: with one that did, every
    request would be housekeeping, and Hilo would store nothing."""
    if not _are_patterns(values):
        return False
    return not any(re.search(value, "") or all(re.search(value, text) for text in _ANY_MESSAGES)
                   for value in values)


NON_EMPTY = Allowed(lambda v: bool(v.strip()), "a non-empty string")
# Control characters break HTTP headers (an API key is sent as one) and log lines.
NO_CONTROL_CHARACTERS = Allowed(lambda v: v.isprintable(), "printable characters only")
HEADER_NAME = Allowed(lambda v: re.fullmatch(r"[A-Za-z0-9-]*", v) is not None,
                      'an HTTP header name such as "X-OpenWebUI-User-Id", or "" for none')


def setting(default: Any, allowed: Allowed | None = None,
            parse: Callable[[str], str] | None = None, words_for_bool: bool = False) -> Any:
    """A key: its default, what it accepts, and how its text is normalised (`parse`
    raises ValueError saying what was expected). With `words_for_bool`, a string key
    also takes TOML's true and false, as "true" and "false" (a key that was a switch)."""
    return field(default=default, metadata={"allowed": allowed, "parse": parse,
                                            "words_for_bool": words_for_bool})


def model_server_url(text: str) -> str:
    """[llm] url read as Ollama reads OLLAMA_HOST: with a scheme (http or https) it is
    kept as written; without one, http:// is assumed, a missing host is 127.0.0.1 and
    a missing port 11434 ("localhost:11434", ":11434", "0.0.0.0", "gpu-box/ollama").
    Raises ValueError saying what a URL here looks like."""
    value = text.strip()
    expected = "expected a URL such as http://127.0.0.1:11434, or host:port as in OLLAMA_HOST"
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ValueError(f"{expected} (no spaces)")
    scheme, has_scheme, rest = value.partition("://")
    if not has_scheme:
        scheme, rest = "http", value
    elif scheme.lower() not in ("http", "https"):
        raise ValueError(f"{expected} (http:// or https://, not {scheme}://)")
    try:
        split = urlsplit(f"{scheme}://{rest}")
        port = split.port
    except ValueError:
        raise ValueError(f"{expected} (the port is a number from 1 to 65535)") from None
    if port == 0:
        raise ValueError(f"{expected} (the port is a number from 1 to 65535)")
    if split.query or split.fragment:
        raise ValueError(f"{expected} (no ?query or #fragment)")
    if has_scheme:
        if not split.hostname:
            raise ValueError(f"{expected} (it names no host)")
        return value.rstrip("/")
    host = split.hostname or "127.0.0.1"
    if ":" in host:  # an IPv6 address goes back in brackets
        host = f"[{host}]"
    path = split.path.strip("/")
    return f"http://{host}:{port or OLLAMA_PORT}" + (f"/{path}" if path else "")


def optional_server_url(text: str) -> str:
    """[llm] distill_url: "" (the same server as [llm] url), or a model server URL."""
    return "" if not text.strip() else model_server_url(text)


def redis_url(text: str) -> str:
    """[queue] redis_url: redis://, rediss:// or unix://, with a valid port if any."""
    expected = "expected a URL such as redis://127.0.0.1:6379/0 (redis://, rediss:// or unix://)"
    try:
        split = urlsplit(text.strip())
        _ = split.port  # raises on a port that is not a number from 0 to 65535
    except ValueError:
        raise ValueError(expected) from None
    if split.scheme not in ("redis", "rediss", "unix") or not (split.netloc or split.path):
        raise ValueError(expected)
    return text.strip()


# Ollama reads keep_alive as seconds (a number; negative: forever) or a Go duration.
_GO_DURATION = re.compile(r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")
KEEP_ALIVE = Allowed(
    lambda v: bool(re.fullmatch(r"\s*-?\d+\s*", v) or _GO_DURATION.fullmatch(v.strip())),
    'seconds ("300", "-1" for ever) or a duration such as "5m", "1h30m"')
TIMEZONE = Allowed(lambda v: v == LOCAL_ZONE or _is_timezone(v),
                   'an IANA time zone such as Europe/Madrid, or "local" for this machine\'s')


def system_timezone(env: Mapping[str, str] | None = None, root: Path = Path("/")) -> str:
    """This machine's IANA time zone name: from TZ, else /etc/timezone, else where the
    /etc/localtime link points; UTC when none names a zone Python knows.

    (`datetime.now().astimezone()` gives only an offset, which cannot say when
    daylight-saving time changes it.)"""
    env = os.environ if env is None else env
    candidates = [_zone_in_path(env.get("TZ", "").strip().lstrip(":"))]
    try:
        candidates.append((root / "etc" / "timezone").read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError):
        pass
    localtime = root / "etc" / "localtime"
    if localtime.is_symlink():
        candidates.append(_zone_in_path(str(localtime.resolve())))
    for name in candidates:
        if name and _is_timezone(name):
            return "UTC" if name in _UTC_NAMES else name
    return "UTC"


# What /etc/localtime often points at on a machine kept in UTC: said as "UTC".
_UTC_NAMES = {"Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu", "UCT", "Universal", "Zulu"}


def _zone_in_path(text: str) -> str:
    """"/usr/share/zoneinfo/Europe/Lisbon" -> "Europe/Lisbon"; other text unchanged."""
    _, found, name = text.rpartition("zoneinfo/")
    return name if found else text


@dataclass
class DataConfig(ReadOnly):
    """[data]: where the memory lives."""

    dir: str = setting("~/.local/share/hilo", NON_EMPTY)


@dataclass
class MemoryConfig(ReadOnly):
    """[memory]: the context's layers and their sizes, and when the learning jobs run."""

    window_events: int = setting(6, between(1, 200))
    compaction_threshold: int = setting(16, between(2, 1000))
    chunk_size: int = setting(8, between(1, 500))
    facts_k: int = setting(4, between(0, 50))
    cards_k: int = setting(2, between(0, 50))
    diary_k: int = setting(1, between(0, 10))
    working_memory_cap: int = setting(50, between(1, 10_000))
    consolidation_interval_hours: int = setting(6, between(1, 24 * 7))
    session_idle_minutes: int = setting(30, between(1, 24 * 60))
    max_message_chars: int = setting(32_000, between(100, 10_000_000))
    bootstrap_max_tokens: int = setting(500, between(0, 100_000))
    dedupe_similarity: float = setting(0.75, between(0.1, 1))
    user_id: str = setting("default", NON_EMPTY)
    # What is retrieved for a message after a conversation's first (facts, cards, quoted
    # messages not shown yet), placed just before it: at most this many tokens.
    retrieved_max_tokens: int = setting(300, between(0, 100_000))
    # How much memory a conversation's first message gets: "true" as much as the budget
    # holds (best recall; on a CPU that prompt is read at tens of tokens a second),
    # "false" retrieved_max_tokens, "auto" what the engine reads in
    # first_message_extra_seconds more (its measured speed: app/model/prompt_speed.py).
    fill_first_message: str = setting("auto", one_of("auto", "true", "false"),
                                      parse=lambda v: v.strip().lower(), words_for_bool=True)
    # 3 s: on LoCoMo development at 500 tokens/s 0.84 (1 s), 0.88 (2 s), 0.89 (3 s) of the
    # evidence; a CPU at 60 tokens/s waits 3 s for 180 tokens (docs/memory-on-a-cpu.md).
    first_message_extra_seconds: float = setting(3.0, between(0, 600))


@dataclass
class ImportanceConfig(ReadOnly):
    """[importance]: how much a message of each role counts at first."""

    user: float = setting(0.5, between(0, 1))
    assistant: float = setting(0.5, between(0, 1))
    tool: float = setting(0.3, between(0, 1))
    system: float = setting(0.1, between(0, 1))


@dataclass
class LLMConfig(ReadOnly):
    """[llm]: the model server, its models and its context window."""

    provider: str = setting("ollama", one_of("ollama", "openai"))
    url: str = setting("http://127.0.0.1:11434", parse=model_server_url)
    chat_model: str = setting("gemma3:4b", NON_EMPTY)
    distill_model: str = setting("gemma3:4b", NON_EMPTY)
    # The workers' model server; "" is [llm] url's (and then they wait for the chat).
    distill_url: str = setting("", parse=optional_server_url)
    api_key: str = setting("", NO_CONTROL_CHARACTERS)
    num_ctx: int = setting(4096, between(512, 1_048_576))
    reply_reserve: int = setting(1024, between(64, 1_000_000))
    keep_alive: str = setting("5m", KEEP_ALIVE)
    temperature: float = setting(0.7, between(0, 2))
    timeout_seconds: float = setting(120.0, between(1, 3600))
    connect_timeout_seconds: float = setting(3.0, between(0.1, 120))
    # A learning call is cut this long after it was sent, however fast tokens come.
    learning_deadline_seconds: float = setting(120.0, between(1, 3600))


@dataclass
class EmbedderConfig(ReadOnly):
    """[embedder]: what turns text into vectors, and when search goes approximate."""

    kind: str = setting("ollama", one_of("ollama", "local", "none"))
    model: str = setting("nomic-embed-text", NON_EMPTY)
    batch_size: int = setting(32, between(1, 4096))
    threads: int = setting(0, between(0, 256))
    ann_threshold: int = setting(20_000, between(0, 1_000_000_000))


@dataclass
class QueueConfig(ReadOnly):
    """[queue]: the job queue, its workers, retries, and how they yield to the chat."""

    backend: str = setting("sqlite", one_of("sqlite", "redis"))
    redis_url: str = setting("redis://127.0.0.1:6379/0", parse=redis_url)
    workers: int = setting(4, between(1, 64))
    poll_max_delay: float = setting(0.5, between(0.01, 60))
    max_attempts: int = setting(5, between(1, 100))
    backoff_base_seconds: float = setting(2.0, between(0, 3600))
    worker_nice: int = setting(10, between(0, 19))
    # The user first: jobs that need the chat's model server wait until it has served no
    # chat request for this long (0: they never wait), unless their work has waited
    # max_defer_seconds already.
    chat_idle_seconds: float = setting(20.0, between(0, 3600))
    max_defer_seconds: float = setting(600.0, between(0, 7 * 24 * 3600))


@dataclass
class LearnConfig(ReadOnly):
    """[learn]: how much of the chat's model server learning may take."""

    # Learning's engine seconds may be at most this share of the chat's own over the last
    # day (app/learn/engine_time.py); past it, learning's model calls wait for credit.
    # 0: learning never calls the model (rules only). Only on the chat's own server.
    engine_share: float = setting(0.5, between(0, 1_000_000))
    # Turns that have waited this long for the share are learned by rule instead.
    share_wait_minutes: float = setting(30.0, between(0, 7 * 24 * 60))


@dataclass
class WriterConfig(ReadOnly):
    """[writer]: the single writer's queue of pending writes."""

    queue_size: int = setting(1024, between(1, 1_000_000))
    max_batch: int = setting(512, between(1, 100_000))


# Open WebUI's background requests that are not "### Task:" prompts (those are known by
# their structure: app/api/housekeeping.py): an emoji, the choice of a tool, merging
# several models' answers, as its default prompts open (the same in 0.6.43 and 0.12.4).
OPEN_WEBUI_HOUSEKEEPING = (
    r"\A\s*Your task is to reflect the speaker's likely facial expression through a fitting emoji",
    r"(?s)\A\s*Available Tools:.*Your task is to choose and return the correct tool\(s\)",
    r"\A\s*You have been provided with a set of responses from various models",
)


@dataclass
class ServerConfig(ReadOnly):
    """[server]: `hilo serve`: where it listens, who may call it, what it relays."""

    host: str = setting("127.0.0.1", NON_EMPTY)
    port: int = setting(11435, between(1, 65535))
    token: str = setting("", NO_CONTROL_CHARACTERS)
    allowed_hosts: str = setting("")
    allowed_origins: str = setting("")
    # A multi-person client's own user header (Open WebUI: "X-OpenWebUI-User-Id"): each
    # value is a Hilo user of its own, namespaced (app/http/callers.py). "": ignored.
    client_user_header: str = setting("", HEADER_NAME)
    # A chat request whose system messages or last message match one of these is a
    # client's housekeeping: relayed without memory, stored nowhere.
    housekeeping_patterns: tuple[str, ...] = setting(
        OPEN_WEBUI_HOUSEKEEPING, Allowed(
            _are_housekeeping_patterns, "a list of regular expressions, none matching every "
            "message (as \"\" or \".*\" do: Hilo would store nothing)"))


@dataclass
class ScheduleConfig(ReadOnly):
    """[schedule]: the zone that scheduled tasks' cron expressions are read in."""

    timezone: str = setting(LOCAL_ZONE, TIMEZONE)

    def __post_init__(self) -> None:
        # Resolved here, once, so every reader of the key gets a name ZoneInfo accepts.
        if self.timezone == LOCAL_ZONE:
            object.__setattr__(self, "timezone", system_timezone())


@dataclass
class LoggingConfig(ReadOnly):
    """[logging]: how much is logged, and how."""

    level: str = setting("info", one_of("debug", "info", "warning", "error"))
    format: str = setting("auto", one_of("auto", "json", "console"))


@dataclass
class ConfigOrigin(ReadOnly):
    """Where a Config came from, for `hilo doctor` to say."""

    file: Path | None = None      # None: no file, the built-in defaults
    file_found_by: str = ""       # "--config", "HILO_CONFIG", "the current folder", ...
    data_dir_from: str = "the built-in default"
    searched: tuple[Path, ...] = ()  # the places looked in, when no file was named


@dataclass
class NotifyConfig(ReadOnly):
    """Where scheduled tasks' replies go besides `hilo chat` (workers/notify.py)."""

    webhook_url: str = setting("", Allowed(
        lambda v: v == "" or v.startswith(("http://", "https://")),
        'an http:// or https:// URL, or "" for none'))
    webhook_kind: str = setting("ntfy", one_of("ntfy", "slack", "json"))
    webhook_attempts: int = setting(3, between(1, 10))
    webhook_timeout_seconds: float = setting(10.0, between(0.5, 120))
    desktop: bool = setting(True)


# No command holding one of these is ever covered by an allow rule (the terminal's rules,
# app/turn/tools/terminal_rules.py, read them from here): a rule holding one never applies.
SHELL_METACHARACTERS = re.compile(r"[;&|`$<>()\\\n\r\x00]")
# The placeholder a rule may write with < and > (terminal_rules.PATH_IN_WORKDIR).
_PATH_PLACEHOLDER = "<path>"


def _are_commands(values: tuple[str, ...]) -> bool:
    """Command lines of plain words, quotes closed: what an allow rule can match."""
    for value in values:
        try:
            words = shlex.split(value)
        except ValueError:
            return False
        if not words or not value.isprintable() or any(
                SHELL_METACHARACTERS.search(w) for w in words if w != _PATH_PLACEHOLDER):
            return False
    return True


# Why a rule is refused, after what it should be.
_NEVER_MATCHES = ("; a shell character (; & | ` $ < > ( ) \\) or an unclosed quote never "
                  "matches a command")


def _are_variable_names(values: tuple[str, ...]) -> bool:
    return all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value) for value in values)


def _are_hosts(values: tuple[str, ...]) -> bool:
    return all(re.fullmatch(r"(\*\.)?[A-Za-z0-9.-]+(:\d+)?", value) for value in values)


@dataclass
class ToolsConfig(ReadOnly):
    """Hilo's own agent: where the model may call tools, and their bounds (app/turn/tools/)."""

    chat: bool = setting(True)
    tasks: bool = setting(True)
    http: bool = setting(False)
    max_steps: int = setting(8, between(1, 100))
    max_seconds: float = setting(300.0, between(1, 86_400))
    terminal: bool = setting(True)
    terminal_allow_rules: tuple[str, ...] = setting(
        (), Allowed(_are_commands, "a list of allow rules such as [\"git status\", \"ls *\", "
                                   "\"cat <path>\"]" + _NEVER_MATCHES))
    # Before rules: each prefix is read as the rule "PREFIX *".
    terminal_allowed_prefixes: tuple[str, ...] = setting(
        (), Allowed(_are_commands, "a list of command prefixes such as [\"df -h\", \"uptime\"]"
                    + _NEVER_MATCHES))
    terminal_sandbox: str = setting("bubblewrap", one_of("bubblewrap", "none"))
    terminal_environment: tuple[str, ...] = setting(
        (), Allowed(_are_variable_names, 'a list of variable names such as ["GOPATH"]'))
    terminal_shell: bool = setting(False)
    terminal_timeout_seconds: float = setting(30.0, between(0.1, 3600))
    terminal_output_chars: int = setting(4000, between(100, 1_000_000))
    terminal_workdir: str = setting("")
    terminal_memory_mb: int = setting(1024, between(64, 1_048_576))
    web_allowed_hosts: tuple[str, ...] = setting(
        (), Allowed(_are_hosts,
                    'a list of host names such as ["docs.python.org", "*.wikipedia.org"]'))
    web_timeout_seconds: float = setting(10.0, between(0.1, 600))
    web_max_bytes: int = setting(1_000_000, between(1000, 100_000_000))
    web_output_chars: int = setting(4000, between(100, 1_000_000))
    macro_confidence: float = setting(0.8, between(0, 1))
    macro_min_support: int = setting(3, between(1, 1000))


@dataclass
class Config(ReadOnly):
    """Every section, the `[[scheduled_tasks]]`, and where they came from."""

    data: DataConfig = field(default_factory=DataConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    learn: LearnConfig = field(default_factory=LearnConfig)
    writer: WriterConfig = field(default_factory=WriterConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    # `[[scheduled_tasks]]` entries, synced into the database at every worker start.
    scheduled_tasks: tuple[Mapping[str, Any], ...] = ()
    origin: ConfigOrigin = field(default_factory=ConfigOrigin, compare=False)

    @property
    def data_dir(self) -> Path:
        return Path(self.data.dir).expanduser()

    def replace(self, **sections: Any) -> Config:
        """A copy with whole sections or single keys changed: replace(llm={"url": u})."""
        changes = {}
        for name, value in sections.items():
            current = getattr(self, name)
            if isinstance(value, Mapping) and dataclasses.is_dataclass(current):
                value = dataclasses.replace(current, **value)
            changes[name] = value
        return dataclasses.replace(self, **changes)


def with_option(config: Config, section: str, name: str, value: Any, option: str) -> Config:
    """`config` with one key set from a command-line option (`hilo serve --port`), checked
    as the file's or a variable's value is: ConfigError naming the option."""
    return config.replace(**{section: {name: _check(section, name, value, option)}})


SECTIONS: dict[str, type] = {
    f.name: f.type for f in dataclasses.fields(Config)
    if f.name not in ("scheduled_tasks", "origin")
}
# `from __future__ import annotations` turns field types into strings; resolve them here.
SECTIONS = {name: globals()[typ] if isinstance(typ, str) else typ for name, typ in SECTIONS.items()}


def _fields(section: str) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(SECTIONS[section])}


def _type_name(typ: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false",
            tuple: "a list of strings (in a variable: a JSON array)"}[typ]


def _field_type(f: dataclasses.Field) -> type:
    names = {"int": int, "float": float, "str": str, "bool": bool, "tuple[str, ...]": tuple}
    return names[f.type] if isinstance(f.type, str) else f.type


def _coerce(value: Any, typ: type, key: str, source: str, from_env: bool) -> Any:
    """Parse env strings; check TOML values. Raise ConfigError naming key and source."""
    try:
        if typ is tuple:
            items = json.loads(value) if from_env else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ValueError
            return tuple(items)
        if from_env:
            if typ is bool:
                lowered = value.strip().lower()
                if lowered not in {"1", "0", "true", "false", "yes", "no", "on", "off"}:
                    raise ValueError
                return lowered in {"1", "true", "yes", "on"}
            return typ(value.strip()) if typ is not str else value
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if type(value) is not typ:
            raise ValueError
        return value
    except ValueError:
        raise ConfigError(
            f"{key} = {value!r} from {source}: expected {_type_name(typ)}"
        ) from None


def _check(section: str, name: str, value: Any, source: str) -> Any:
    f = _fields(section)[name]
    key = f"{section}.{name}"
    if f.metadata.get("words_for_bool") and isinstance(value, bool):
        value = "true" if value else "false"
    value = _coerce(value, _field_type(f), key, source, from_env=source.startswith("environment"))
    parse: Callable[[str], str] | None = f.metadata.get("parse")
    if parse is not None:
        try:
            value = parse(value)
        except ValueError as exc:
            raise ConfigError(f"{key} = {value!r} from {source}: {exc}") from None
    allowed: Allowed | None = f.metadata.get("allowed")
    # A default passes its own check (tested): config.toml repeats them, and checking the
    # default patterns again costs every process a few milliseconds of start-up.
    if allowed is not None and value != f.default and not allowed.check(value):
        raise ConfigError(f"{key} = {value!r} from {source}: expected {allowed.describe}")
    return value


def _from_file(path: Path) -> tuple[dict[str, dict[str, Any]], tuple[Mapping[str, Any], ...]]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory: name the file in it") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    source = f"file {path}"
    values: dict[str, dict[str, Any]] = {}
    tasks = raw.pop("scheduled_tasks", [])
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise ConfigError(f"scheduled_tasks from {source}: expected [[scheduled_tasks]] tables")
    for section, table in raw.items():
        if section not in SECTIONS:
            raise ConfigError(
                f"[{section}] from {source}: unknown section; known: {', '.join(SECTIONS)}"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{section} from {source}: expected a [{section}] table")
        known = _fields(section)
        for name, value in table.items():
            if name not in known:
                raise ConfigError(
                    f"{section}.{name} from {source}: unknown key; "
                    f"[{section}] has {', '.join(known)}"
                )
            values.setdefault(section, {})[name] = _check(section, name, value, source)
    return values, tuple(tasks)


def _env_key(var: str) -> tuple[str, str]:
    """HILO_LLM_URL -> ("llm", "url"). Sections never contain "_", keys may."""
    rest = var[len(ENV_PREFIX):].lower()
    section, _, name = rest.partition("_")
    if section not in SECTIONS or name not in _fields(section):
        import difflib  # start-up: only a misspelt variable needs it

        known = [f"HILO_{s.upper()}_{k.upper()}" for s in SECTIONS for k in _fields(s)]
        # Only a near miss is a suggestion: HILO_FOO_BAR is no typo of HILO_TOOLS_CHAT.
        close = difflib.get_close_matches(var, known, n=1, cutoff=0.8)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ConfigError(
            f"{var} from environment: unknown setting; {hint}"
            "the variables are HILO_<SECTION>_<KEY> for the keys in config.toml"
        )
    return section, name


def _from_env(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    values: dict[str, dict[str, Any]] = {}
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX) or var in ENV_CONTROL:
            continue
        section, name = _env_key(var)
        values.setdefault(section, {})[name] = _check(
            section, name, env[var], f"environment variable {var}"
        )
    return values


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    """The user's config file: $XDG_CONFIG_HOME/hilo/config.toml, else ~/.config/hilo/."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME", "")
    # The XDG spec ignores a relative XDG_CONFIG_HOME.
    folder = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return folder / "hilo" / "config.toml"


def find_config_file(env: Mapping[str, str] | None = None) -> ConfigOrigin:
    """The file to read when none is given on the command line: `HILO_CONFIG`, else
    ./config.toml, else the user's config folder; else none (the defaults)."""
    env = os.environ if env is None else env
    if env.get("HILO_CONFIG"):
        return ConfigOrigin(Path(env["HILO_CONFIG"]), "HILO_CONFIG")
    places = ((Path("config.toml"), "the current folder"),
              (user_config_path(env), "the user's config folder"))
    for path, found_by in places:
        if path.is_file():
            return ConfigOrigin(path.absolute(), found_by)
    return ConfigOrigin(searched=tuple(p.absolute() for p, _ in places))


def load_config(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    data_dir: str | Path | None = None,
) -> Config:
    """Defaults, then the file, then the environment, then an explicit --data-dir."""
    env = os.environ if env is None else env
    origin = ConfigOrigin(Path(path), "--config") if path is not None else find_config_file(env)
    file_values, tasks = _from_file(origin.file) if origin.file is not None else ({}, ())
    env_values = _from_env(env)

    sections = {}
    for section, cls in SECTIONS.items():
        merged = {**file_values.get(section, {}), **env_values.get(section, {})}
        sections[section] = cls(**merged)
    if data_dir is not None:
        sections["data"] = DataConfig(dir=_check("data", "dir", str(data_dir), "--data-dir"))
        data_dir_from = "--data-dir"
    elif "dir" in env_values.get("data", {}):
        data_dir_from = "environment variable HILO_DATA_DIR"
    elif "dir" in file_values.get("data", {}):
        data_dir_from = f"file {origin.file}"
    else:
        data_dir_from = "the built-in default"
    origin = dataclasses.replace(origin, data_dir_from=data_dir_from)
    config = Config(**sections, scheduled_tasks=tasks, origin=origin)
    _check_consistency(config)
    return config


def _check_consistency(config: Config) -> None:
    """Rules across keys that a single key's range cannot express."""
    if config.llm.reply_reserve >= config.llm.num_ctx:
        raise ConfigError(
            f"llm.reply_reserve = {config.llm.reply_reserve}: expected less than "
            f"llm.num_ctx ({config.llm.num_ctx})"
        )
    if config.memory.chunk_size > config.memory.compaction_threshold:
        raise ConfigError(
            f"memory.chunk_size = {config.memory.chunk_size}: expected at most "
            f"memory.compaction_threshold ({config.memory.compaction_threshold})"
        )
