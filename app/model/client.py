"""The one place Hilo talks to a model server: `ModelClient`.

It speaks Ollama's native API (provider "ollama") or the OpenAI-compatible API that
llama.cpp, vLLM, LM Studio and Ollama's own /v1 serve (provider "openai"): app/model/apis.py.
It also relays what clients of `hilo serve` send: a chat request in the client's own
API (`relay_chat`, the reply passed on as the bytes arrive and read on the side:
app/model/relay.py), and any other request to the model server, unchanged (`relay`).
Every failure surfaces as a `ModelError` subclass (app/model/errors.py): its message
says what failed, where, and what to do; its `retryable` tells workers whether trying
again can help. Retrying itself is the caller's policy, not this module's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.model.apis import JsonReply, OllamaAPI, OpenAIAPI, json_reply_text
from app.model.errors import (
    ModelCallYielded,
    ModelError,
    ModelHTTPError,
    ModelNotFound,
    OverBudget,
)
from app.model.json_modes import (
    JsonModes,
    JsonSchema,
    ollama_format,
    openai_format,
    with_schema,
)
from app.model.messages import Message, ToolSpec
from app.model.relay import relayed_chat, translated_chat
from app.model.replies import ReplyRecord, SentChat
from app.model.stream import ChatReply, ChatStream
from app.model.transport import ModelActivity, Relayed, Transport
from app.model.usage import (
    ANSWERED,
    FAILED,
    GAVE_WAY,
    PAST_DEADLINE,
    TOO_LONG,
    CallBudget,
    JsonCall,
)

if TYPE_CHECKING:
    from app.config import Config

__all__ = ["PROVIDERS", "ModelClient"]

PROVIDERS = ("ollama", "openai")

# What a learning call continues of the chat it follows (ModelClient.continue_json): what
# the server's prompt cache is keyed on — the model, the messages (added separately), the
# tools a chat template renders into the prompt, the template's own arguments, llama.cpp's
# slot — and what would reload the model if it changed: keep_alive, and the Ollama options
# fixed when a model is loaded (num_ctx and its neighbours). Nothing that shapes only the
# reply reaches it: no limits (max_tokens, num_predict), stops, sampling, penalties,
# seeds, formats, streaming or thinking — a client's `max_tokens: 24` would cut the JSON off.
_CONTINUED_FIELDS = ("model", "tools", "chat_template_kwargs", "id_slot", "keep_alive")
_CONTINUED_OPTIONS = ("num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "use_mmap",
                      "use_mlock", "numa", "low_vram")


class ModelClient:
    """Chat, JSON extraction and embeddings against one model server.

    Safe to share between threads: one pooled httpx.Client underneath.
    """

    def __init__(
        self,
        provider: str,
        url: str,
        chat_model: str,
        distill_model: str,
        embed_model: str,
        num_ctx: int,
        keep_alive: str,
        timeout_seconds: float,
        connect_timeout_seconds: float,
        api_key: str | None = None,
        activity: ModelActivity | None = None,
        json_modes: JsonModes | None = None,
        learning_deadline_seconds: float = 120.0,
        on_json_call: Callable[[JsonCall], None] | None = None,
        before_json_call: Callable[[str], None] | None = None,
    ) -> None:
        """`activity`, when given, is told when each request that makes the model work
        starts and ends (a front-end's client; the worker's has none). `json_modes`: how
        each server and model takes a request for JSON (app/model/json_modes.py); by
        default learned afresh by this client. A learning call (generate_json,
        continue_json) may be refused by `before_json_call(job)` raising (ShareSpent), is
        cut `learning_deadline_seconds` after it was sent, and `on_json_call` is told how
        it ended (app/model/usage.py; it must not raise)."""
        if provider not in PROVIDERS:
            raise ValueError(f"[llm] provider is {provider!r}; use one of: {', '.join(PROVIDERS)}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"[llm] url is {url!r}; it must start with http:// or https://")
        self.provider, self.url = provider, url.rstrip("/")
        self.chat_model, self.distill_model, self.embed_model = chat_model, distill_model, embed_model
        self.num_ctx = num_ctx
        self.keep_alive = keep_alive
        self.timeout_seconds = timeout_seconds
        self.connect_timeout_seconds = connect_timeout_seconds
        self.json_modes = json_modes or JsonModes()
        self.learning_deadline_seconds = learning_deadline_seconds
        self.on_json_call = on_json_call
        self.before_json_call = before_json_call
        self._transport = Transport(
            url=self.url,
            provider=provider,
            timeout_seconds=timeout_seconds,
            connect_timeout_seconds=connect_timeout_seconds,
            api_key=api_key or None,
            # Later entries win: a model used for chat is named by its chat setting.
            model_settings={
                embed_model: "[embedder] model",
                distill_model: "[llm] distill_model",
                chat_model: "[llm] chat_model",
            },
            activity=activity,
        )
        self._api: OllamaAPI | OpenAIAPI = (
            OllamaAPI(self._transport, num_ctx, keep_alive)
            if provider == "ollama"
            else OpenAIAPI(self._transport, _openai_prefix(self.url))
        )

    @classmethod
    def from_config(cls, cfg: Config, *, activity: ModelActivity | None = None,
                    url: str | None = None, json_modes: JsonModes | None = None,
                    on_json_call: Callable[[JsonCall], None] | None = None,
                    before_json_call: Callable[[str], None] | None = None) -> ModelClient:
        """Build from the program's Config (its `llm` and `embedder` sections); `url`
        replaces [llm] url (the workers' own model server, [llm] distill_url)."""
        settings = cfg.llm
        return cls(
            provider=settings.provider,
            url=url or settings.url,
            chat_model=settings.chat_model,
            distill_model=settings.distill_model,
            embed_model=cfg.embedder.model,
            num_ctx=settings.num_ctx,
            keep_alive=settings.keep_alive,
            timeout_seconds=settings.timeout_seconds,
            connect_timeout_seconds=settings.connect_timeout_seconds,
            api_key=settings.api_key or None,
            activity=activity,
            json_modes=json_modes,
            learning_deadline_seconds=settings.learning_deadline_seconds,
            on_json_call=on_json_call,
            before_json_call=before_json_call,
        )

    def chat_stream(
        self, messages: Sequence[Message], *, model: str | None = None,
        options: Mapping[str, Any] | None = None, tools: Sequence[ToolSpec] | None = None,
    ) -> ChatStream:
        """Start a streamed reply; see ChatStream for when errors surface. With `tools`,
        the model may call them: the calls are in `stream.tool_calls` once it ends."""
        model = model or self.chat_model
        sent: dict[str, Any] = {}
        return ChatStream(self._api.chat_events(model, messages, options, tools, sent), model,
                          sent=sent)

    def chat(
        self, messages: Sequence[Message], *, model: str | None = None, options: Mapping[str, Any] | None = None
    ) -> ChatReply:
        return self._api.chat(model or self.chat_model, messages, options)

    def generate_json(
        self,
        prompt: str,
        schema: JsonSchema,
        *,
        system: str | None = None,
        temperature: float = 0.1,
        model: str | None = None,
        yield_to: Callable[[], bool] | None = None,
        max_tokens: int | None = None,
        job: str = "json",
    ) -> str:
        """The model's raw text, constrained to `schema`; parse it leniently
        (app.learn.model_output.parse_json_leniently).

        The text is returned unparsed because local models still break JSON now and
        then, and the caller decides whether to retry or fall back. With `yield_to`, the
        call gives way (ModelCallYielded) the moment yield_to() says a person needs the
        model. JSON is asked for as this server and model take it (app/model/json_modes.py).
        The call has a budget of its own (app/model/usage.py): at most `max_tokens`
        generated and this client's learning deadline; past either it is cut (OverBudget).
        `job` names what asked, for on_json_call.
        """
        model = model or self.distill_model
        return self._learning_call(job, model, max_tokens, lambda mode, budget: (
            self._api.generate_json(model, prompt, schema, system, temperature, yield_to, mode,
                                    budget)))

    def continue_json(self, after: SentChat, instruction: str, schema: JsonSchema, *,
                      temperature: float = 0.1,
                      yield_to: Callable[[], bool] | None = None,
                      max_tokens: int | None = None, job: str = "json") -> str:
        """The model's raw JSON text for `instruction`, asked as the next message of the
        chat `after`: the same messages, its reply, then the instruction, so a server
        whose KV cache still holds that chat reads only the instruction anew. Of the
        chat's request only what keeps that cache (_CONTINUED_FIELDS, _CONTINUED_OPTIONS)
        is sent again; the reply's shape and limits are the learning call's own.
        `yield_to`, `max_tokens`, `job` as for generate_json."""
        body = {k: after.body[k] for k in _CONTINUED_FIELDS if k in after.body}
        model = str(body.get("model") or self.distill_model)
        options = after.body.get("options")
        kept = ({k: v for k, v in options.items() if k in _CONTINUED_OPTIONS}
                if isinstance(options, Mapping) else {})

        def ask(mode: str, budget: CallBudget) -> JsonReply:
            question = {"role": "user", "content": with_schema(instruction, schema, mode)}
            request = {**body,
                       "messages": [*after.body.get("messages", []),
                                    {"role": "assistant", "content": after.reply}, question]}
            if after.path == "/api/chat":
                request.update(ollama_format(schema, mode),
                               options={**kept, "temperature": temperature})
            else:
                request.update(openai_format(schema, mode), temperature=temperature)
            return json_reply_text(self._transport, after.path, request, yield_to, budget)

        return self._learning_call(job, model, max_tokens, ask)

    def _learning_call(self, job: str, model: str, max_tokens: int | None,
                       ask: Callable[[str, CallBudget], JsonReply]) -> str:
        """ask(mode, budget) in the JSON mode this server takes; on_json_call is told how
        it ended, whatever the end."""
        if self.before_json_call is not None:
            self.before_json_call(job)  # a call refused here was never made: nothing to record
        budget = CallBudget(max_tokens, self.learning_deadline_seconds)
        started, clock = time.time(), time.monotonic()
        reply, outcome, detail = None, FAILED, ""
        try:
            reply = self._in_json_mode(model, lambda mode: ask(mode, budget))
            outcome = ANSWERED
            return reply.text
        except OverBudget as exc:
            outcome, detail = (TOO_LONG if exc.limit == "tokens" else PAST_DEADLINE), str(exc)
            raise
        except ModelCallYielded:
            outcome = GAVE_WAY
            raise
        except ModelError as exc:
            detail = str(exc)
            raise
        finally:
            if self.on_json_call is not None:
                self.on_json_call(JsonCall(
                    job=job, url=self.url, model=model, started_at=started,
                    wall_ms=(time.monotonic() - clock) * 1000, outcome=outcome, budget=budget,
                    prompt_tokens=reply.prompt_tokens if reply else None,
                    cached_tokens=reply.cached_tokens if reply else None,
                    reply_tokens=reply.reply_tokens if reply else None,
                    engine=reply.engine if reply else None, detail=detail))

    def _in_json_mode(self, model: str, ask: Callable[[str], JsonReply]) -> JsonReply:
        """ask(mode) on the rung this server and model are on; a refusal of that rung
        moves them down and asks again (a refused request generated nothing)."""
        while True:
            mode = self.json_modes.mode(self.url, model)
            try:
                return ask(mode)
            except ModelHTTPError as exc:
                if not self.json_modes.refused(self.url, model, mode, exc):
                    raise

    def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        """One vector per text, in order, from a single batched request."""
        if not texts:
            return []
        vectors = self._api.embed(model or self.embed_model, list(texts))
        if not isinstance(vectors, list) or len(vectors) != len(texts):
            count = len(vectors) if isinstance(vectors, list) else "no"
            raise self._transport.malformed(self._api.embed_endpoint, f"{count} embeddings for {len(texts)} texts")
        if not all(isinstance(v, list) and all(isinstance(x, (int, float)) for x in v) for v in vectors):
            raise self._transport.malformed(self._api.embed_endpoint, "an embedding is not a list of numbers")
        return [[float(x) for x in v] for v in vectors]

    def list_models(self) -> list[str]:
        """Names of the models the server offers (for Ollama: the pulled ones)."""
        return self._api.list_models()

    def relay(self, method: str, path: str, *, content: bytes | None = None, params: Any = None,
              content_type: str | None = None) -> Relayed:
        """Pass one request to the server unchanged and its answer back as it arrives,
        whatever its status; ModelError only when there is none. `path` is the client's
        (/api/..., /v1/...)."""
        headers = {"Content-Type": content_type} if content_type else {}
        response, done = self._transport.send(method, self.upstream_path(path), content=content,
                                              params=params, headers=headers)
        return Relayed(response, self._transport, done)

    def relay_chat(self, api: str, body: Mapping[str, Any]) -> ChatStream:
        """Send a client's chat request, in the client's own API ("ollama": /api/chat,
        "openai": /v1/chat/completions), and relay the reply: iterate the stream for the
        bytes the client expects; `stream.record` gathers what Hilo keeps of it.

        Ollama serves both APIs itself, and an OpenAI-compatible server the OpenAI one;
        an Ollama request to an OpenAI-compatible server is translated both ways.
        Refusals raise ModelError when the stream is created, as for chat_stream.
        """
        model = str(body.get("model") or self.chat_model)
        record = ReplyRecord()
        sent: dict[str, Any] = {}
        if api == "ollama" and self.provider == "openai":
            events = translated_chat(self._transport, self.upstream_path("/v1/chat/completions"),
                                      body, record, model, sent)
        else:
            path = "/api/chat" if api == "ollama" else self.upstream_path("/v1/chat/completions")
            events = relayed_chat(self._transport, path, dict(body), api, record, model, sent)
        return ChatStream(events, model, record, sent=sent)

    def upstream_path(self, path: str) -> str:
        """The server's path for a client's: an OpenAI-compatible [llm] url may already
        end in /v1."""
        if self.provider == "openai" and path.startswith("/v1/") and self.url.endswith("/v1"):
            return path[len("/v1"):]
        return path

    def check(self) -> None:
        """Raise the ModelError a user must fix before chatting: server down, model not pulled.

        Only Ollama lists what can be loaded; other servers name models freely, so for
        them reaching the server is the whole check.
        """
        available = self.list_models()
        if self.provider != "ollama":
            return
        pulled = {_full_model_name(name) for name in available}
        for model, setting in ((self.chat_model, "[llm] chat_model"), (self.distill_model, "[llm] distill_model")):
            if _full_model_name(model) not in pulled:
                raise ModelNotFound(model, self.url, self.provider, setting)

    def ping(self) -> bool:
        """Whether the server answers at all."""
        try:
            self.list_models()
        except ModelError:
            return False
        return True

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _openai_prefix(url: str) -> str:
    # Accept both "http://host:8080" and "http://host:8080/v1" in [llm] url.
    return "" if url.endswith("/v1") else "/v1"


def _full_model_name(model: str) -> str:
    # Ollama's naming: "nomic-embed-text" is "nomic-embed-text:latest".
    return model if ":" in model else f"{model}:latest"
