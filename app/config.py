"""Configuration: read once at start into a typed, frozen object.

Sources, later wins: the defaults below, `config.toml`, then `HILO_<SECTION>_<KEY>`
environment variables (e.g. `HILO_LLM_URL`, `HILO_MEMORY_WINDOW_EVENTS`,
`HILO_DATA_DIR`). A wrong type, an unknown key or an out-of-range value stops the
program with one line naming the key, its source and what is allowed.

The defaults here and the repository's `config.toml` are kept identical by a test, so
the file documents every key and the program still runs without it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app.errors import Misconfigured

ENV_PREFIX = "HILO_"
# Variables that select the configuration itself rather than a key in it.
ENV_CONTROL = {"HILO_CONFIG"}


class ConfigError(Misconfigured, ValueError):
    """A configuration value the program cannot run with; str() is one line."""


@dataclass(frozen=True)
class Allowed:
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


def setting(default: Any, allowed: Allowed | None = None) -> Any:
    return field(default=default, metadata={"allowed": allowed})


@dataclass(frozen=True)
class DataConfig:
    dir: str = setting("~/.local/share/hilo")


@dataclass(frozen=True)
class MemoryConfig:
    window_events: int = setting(6, between(1, 200))
    compaction_threshold: int = setting(8, between(2, 1000))
    chunk_size: int = setting(4, between(1, 500))
    facts_k: int = setting(4, between(0, 50))
    cards_k: int = setting(2, between(0, 50))
    diary_k: int = setting(1, between(0, 10))
    working_memory_cap: int = setting(50, between(1, 10_000))
    consolidation_interval_hours: int = setting(6, between(1, 24 * 7))
    session_idle_minutes: int = setting(30, between(1, 24 * 60))
    max_message_chars: int = setting(32_000, between(100, 10_000_000))
    bootstrap_max_tokens: int = setting(500, between(0, 100_000))
    dedupe_similarity: float = setting(0.75, between(0.1, 1))
    user_id: str = setting("default")


@dataclass(frozen=True)
class ImportanceConfig:
    user: float = setting(0.5, between(0, 1))
    assistant: float = setting(0.5, between(0, 1))
    tool: float = setting(0.3, between(0, 1))
    system: float = setting(0.1, between(0, 1))


@dataclass(frozen=True)
class LLMConfig:
    provider: str = setting("ollama", one_of("ollama", "openai"))
    url: str = setting("http://127.0.0.1:11434")
    chat_model: str = setting("gemma3:4b")
    distill_model: str = setting("gemma3:4b")
    api_key: str = setting("")
    num_ctx: int = setting(4096, between(512, 1_048_576))
    reply_reserve: int = setting(1024, between(64, 1_000_000))
    keep_alive: str = setting("5m")
    temperature: float = setting(0.7, between(0, 2))
    timeout_seconds: float = setting(120.0, between(1, 3600))
    connect_timeout_seconds: float = setting(3.0, between(0.1, 120))


@dataclass(frozen=True)
class EmbedderConfig:
    kind: str = setting("ollama", one_of("ollama", "local", "none"))
    model: str = setting("nomic-embed-text")
    batch_size: int = setting(32, between(1, 4096))
    threads: int = setting(0, between(0, 256))
    ann_threshold: int = setting(20_000, between(0, 1_000_000_000))


@dataclass(frozen=True)
class QueueConfig:
    backend: str = setting("sqlite", one_of("sqlite", "redis"))
    redis_url: str = setting("redis://127.0.0.1:6379/0")
    workers: int = setting(4, between(1, 64))
    poll_max_delay: float = setting(0.5, between(0.01, 60))
    max_attempts: int = setting(5, between(1, 100))
    backoff_base_seconds: float = setting(2.0, between(0, 3600))


@dataclass(frozen=True)
class WriterConfig:
    queue_size: int = setting(1024, between(1, 1_000_000))
    max_batch: int = setting(512, between(1, 100_000))


@dataclass(frozen=True)
class ServerConfig:
    host: str = setting("127.0.0.1")
    port: int = setting(11435, between(1, 65535))
    token: str = setting("")


@dataclass(frozen=True)
class ScheduleConfig:
    timezone: str = setting("UTC", Allowed(_is_timezone, "an IANA time zone such as Europe/Madrid"))


@dataclass(frozen=True)
class LoggingConfig:
    level: str = setting("info", one_of("debug", "info", "warning", "error"))
    format: str = setting("auto", one_of("auto", "json", "console"))


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    writer: WriterConfig = field(default_factory=WriterConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    # `[[scheduled_tasks]]` entries, synced into the database at every worker start.
    scheduled_tasks: tuple[Mapping[str, Any], ...] = ()

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


SECTIONS: dict[str, type] = {
    f.name: f.type for f in dataclasses.fields(Config) if f.name != "scheduled_tasks"
}
# `from __future__ import annotations` turns field types into strings; resolve them here.
SECTIONS = {name: globals()[typ] if isinstance(typ, str) else typ for name, typ in SECTIONS.items()}


def _fields(section: str) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(SECTIONS[section])}


def _type_name(typ: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[typ]


def _field_type(f: dataclasses.Field) -> type:
    return {"int": int, "float": float, "str": str, "bool": bool}[f.type] if isinstance(f.type, str) else f.type


def _coerce(value: Any, typ: type, key: str, source: str, from_env: bool) -> Any:
    """Parse env strings; check TOML values. Raise ConfigError naming key and source."""
    try:
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
    value = _coerce(value, _field_type(f), key, source, from_env=source.startswith("environment"))
    allowed: Allowed | None = f.metadata.get("allowed")
    if allowed is not None and not allowed.check(value):
        raise ConfigError(f"{key} = {value!r} from {source}: expected {allowed.describe}")
    return value


def _from_file(path: Path) -> tuple[dict[str, dict[str, Any]], tuple[Mapping[str, Any], ...]]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
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
        known = [f"HILO_{s.upper()}_{k.upper()}" for s in SECTIONS for k in _fields(s)]
        close = difflib.get_close_matches(var, known, n=1)
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


def default_config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """`HILO_CONFIG`, else ./config.toml when present, else none (defaults only)."""
    env = os.environ if env is None else env
    if env.get("HILO_CONFIG"):
        return Path(env["HILO_CONFIG"])
    local = Path("config.toml")
    return local if local.is_file() else None


def load_config(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    data_dir: str | Path | None = None,
) -> Config:
    """Defaults, then the file, then the environment, then an explicit --data-dir."""
    env = os.environ if env is None else env
    path = path if path is not None else default_config_path(env)
    file_values, tasks = _from_file(path) if path is not None else ({}, ())
    env_values = _from_env(env)

    sections = {}
    for section, cls in SECTIONS.items():
        merged = {**file_values.get(section, {}), **env_values.get(section, {})}
        sections[section] = cls(**merged)
    config = Config(**sections, scheduled_tasks=tasks)
    if data_dir is not None:
        config = config.replace(data={"dir": str(data_dir)})
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
