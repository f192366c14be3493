"""The gate every request passes first: where it comes from, who sends it, and its size.

In order:
- Host (DNS rebinding): on a loopback connection, the Host header must be an IP address,
  localhost, or a name in `[server] allowed_hosts`, as Ollama does. A web page whose name
  an attacker re-points at 127.0.0.1 sends its own name and is refused. Off loopback the
  token (required there) is the guard.
- Origin (CSRF, whatever the Content-Type): a browser's request from a page on another
  site is refused unless `[server] allowed_origins` names it; pages on localhost and the
  request's own origin are allowed. Clients that are not browsers send no Origin.
- Token: with `[server] token`, or once any per-user token exists (app/access.py), every
  route but /health needs `Authorization: Bearer <token>`. A per-user token fixes the
  user (deps.identify reads it from the scope, for the routes and /mcp alike); the
  shared token lets the header choose. The memory page (/ui, app/ui) sends the same
  token from a cookie, which is read on its paths only; a browser there without a token
  is sent to /ui/login instead of answered 401.
- Guessing: wrong tokens (a header's, or the page's cookie after signing in) are counted
  per client address in a token bucket (`WrongTokens`: a burst, then one more every few
  seconds); past it, a request presenting any token is answered 429 with Retry-After
  and its token is not checked at all, so no guess is answered, right or wrong. The
  first refusal of a run of them is logged.
- Body: at most `max_body` bytes, chunked bodies included.

A pure ASGI middleware, so streamed replies pass through untouched.
"""

from __future__ import annotations

import fnmatch
import functools
import hmac
import ipaddress
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

import apsw

from app.access import TOKEN_PREFIX, token_user, tokens_in_use
from app.config import Config
from app.datadir import DataDir
from app.db import connect_readonly, corrupt_memory
from app.http.errors import error_response
from app.log import get_logger

__all__ = ["log", "OPEN_PATHS", "PAGE_PREFIX", "OPEN_PREFIX", "TOKEN_COOKIE", "TOKEN_USER",
           "SAFE_METHODS", "WRONG_TOKEN_BURST", "WRONG_TOKEN_EVERY_SECONDS",
           "WRONG_TOKEN_ADDRESSES", "WrongTokens", "is_loopback", "host_name", "Gate"]

log = get_logger(__name__)

# Routes open without the token.
OPEN_PATHS = frozenset({"/health", "/ui/login"})
# The memory page's paths: the token may come from its cookie; the stylesheet is public.
PAGE_PREFIX = "/ui"
OPEN_PREFIX = "/ui/static/"
# The cookie the memory page keeps the token in (HttpOnly, SameSite=Strict, Path=/ui).
TOKEN_COOKIE = "hilo_token"
# Where the gate leaves the user a per-user token belongs to (read by deps.caller).
TOKEN_USER = "hilo.token_user"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Wrong tokens one client address may present: a burst, then one every few seconds (ten a
# minute): a person mistyping is never held up, a guesser gets nowhere.
WRONG_TOKEN_BURST = 10
WRONG_TOKEN_EVERY_SECONDS = 6.0
# Addresses remembered at most; the oldest are forgotten first (their buckets refill).
WRONG_TOKEN_ADDRESSES = 10_000


class WrongTokens:
    """A token bucket of wrong tokens per client address. `wait(address)`: how long
    before that address may present a token again (0: now); `wrong(address)`: one was
    wrong. Used on the event loop's thread; a lock keeps it right anywhere."""

    def __init__(self, burst: int = WRONG_TOKEN_BURST,
                 every: float = WRONG_TOKEN_EVERY_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.every, self.clock = burst, every, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # left, when
        self._lock = threading.Lock()

    def _left(self, address: str, now: float) -> float:
        left, when = self._buckets.get(address, (float(self.burst), now))
        return min(float(self.burst), left + (now - when) / self.every)

    def wait(self, address: str) -> float:
        with self._lock:
            left = self._left(address, self.clock())
            if left >= self.burst:
                self._buckets.pop(address, None)  # full again: nothing to remember
            return 0.0 if left >= 1 else (1 - left) * self.every

    def wrong(self, address: str) -> None:
        with self._lock:
            now = self.clock()
            self._buckets[address] = (max(0.0, self._left(address, now) - 1), now)
            self._buckets.move_to_end(address)
            while len(self._buckets) > WRONG_TOKEN_ADDRESSES:
                self._buckets.popitem(last=False)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_name(header: str) -> str:
    """The name in a Host header or an origin's netloc: no port, no brackets, lower case."""
    header = header.strip().lower()
    if header.startswith("[") and "]" in header:
        return header[1:header.index("]")]
    if header.count(":") == 1:
        header = header.partition(":")[0]
    return header.rstrip(".")


def _patterns(setting: str) -> tuple[str, ...]:
    return tuple(p.strip().lower().rstrip("/") for p in setting.split(",") if p.strip())


def _matches(value: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(value, pattern) for pattern in patterns)


class Gate:
    """Host and Origin checks, the bearer token (shared or per-user), the body cap."""

    def __init__(self, app: Any, config: Config, max_body: int) -> None:
        self.app, self.max_body = app, max_body
        self.token = config.server.token.encode()
        self.allowed_hosts = _patterns(config.server.allowed_hosts)
        self.allowed_origins = _patterns(config.server.allowed_origins)
        self.db_path = DataDir.of(config).memory_db
        self._local = threading.local()
        self.wrong_tokens = WrongTokens()
        self._limited: set[str] = set()  # addresses refused since their last good token

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        whole = await self._within_cap(scope, headers, receive, send)
        if whole is not None:
            await self.app(scope, whole, send)

    def _refusal(self, scope: dict, headers: dict[bytes, bytes]) -> Callable | None:
        """The answer to a request that may not pass (an ASGI app), or None when it may."""
        path = scope["path"]
        refusal = self._refuse_host(scope, headers) or self._refuse_origin(scope, headers)
        if refusal is not None:
            return error_response(path, 403, refusal, "forbidden")
        open_path = path in OPEN_PATHS or path.startswith(OPEN_PREFIX)
        presented = b"" if open_path else self._presented(scope, headers)
        address = str((scope.get("client") or ("",))[0])
        if presented and (wait := self.wrong_tokens.wait(address)) > 0:
            return functools.partial(self._guessing, address=address, wait=wait)
        try:
            allowed = open_path or self._authenticate(scope, presented)
        except apsw.Error as exc:  # the token table cannot be read: a damaged database
            error = corrupt_memory(self.db_path, f"cannot be read ({exc})")
            return error_response(path, error.http_status, str(error), error.code)
        if presented and not allowed:
            self.wrong_tokens.wrong(address)
        elif presented:
            self._limited.discard(address)
        if allowed:
            return None
        if _is_page(scope, headers):
            return _sign_in_first
        why = ("[server] token is set" if self.token
               else "per-user tokens exist (`hilo token list`)")
        return error_response(
            path, 401, f"missing or wrong bearer token: {why}, so every request but "
            "/health needs one: send the header `Authorization: Bearer <token>` with the "
            "[server] token or a per-user token (`hilo token add USER` makes one)",
            "unauthorized", {"WWW-Authenticate": "Bearer"})

    async def _within_cap(self, scope: dict, headers: dict[bytes, bytes], receive: Any,
                          send: Any) -> Any | None:
        """`receive` for a body within the cap (MAX_BODY_BYTES), or None once the request
        is answered (too large, a bad length) or its client went away."""
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                await error_response(scope["path"], 400, "the Content-Length header is not "
                                     "a number", "bad_content_length")(scope, receive, send)
                return None
            if int(length) > self.max_body:
                await self._too_large(scope, receive, send, int(length))
                return None
            return receive
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return receive
        # A chunked body: read it here, up to the cap, and hand it on whole.
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # the client went away
            body += message.get("body", b"")
            if len(body) > self.max_body:
                await self._too_large(scope, receive, send, None)
                return None
            if not message.get("more_body"):
                return _replay(bytes(body), receive)

    # -- where the request comes from

    def _refuse_host(self, scope: dict, headers: dict[bytes, bytes]) -> str | None:
        server = scope.get("server")
        if not server or not is_loopback(str(server[0])):
            return None
        header = headers.get(b"host")
        if header is None:
            return None  # HTTP/1.0; every browser sends Host
        name = host_name(header.decode("latin-1"))
        if (_is_ip_address(name) or name == "localhost" or name.endswith(".localhost")
                or _matches(name, self.allowed_hosts)):
            return None
        return (f"Host {name!r} is not served here: Hilo answers on this machine to localhost "
                "and IP addresses only (a web page can point any name at 127.0.0.1). To use "
                "this name, add it to [server] allowed_hosts (HILO_SERVER_ALLOWED_HOSTS)")

    def _refuse_origin(self, scope: dict, headers: dict[bytes, bytes]) -> str | None:
        origin = headers.get(b"origin")
        if origin is None:
            # Browsers send Origin with every cross-site request that can change anything;
            # without it, only a cross-site fetch that says so is refused.
            if (headers.get(b"sec-fetch-site") == b"cross-site"
                    and scope["method"] not in SAFE_METHODS):
                return ("a cross-site request from a browser: Hilo refuses those unless "
                        "their origin is in [server] allowed_origins")
            return None
        origin_text = origin.decode("latin-1").strip().lower().rstrip("/")
        if _matches(origin_text, self.allowed_origins):
            return None
        parts = urlsplit(origin_text)
        if parts.scheme in ("http", "https"):
            name = host_name(parts.netloc)
            if is_loopback(name) or name.endswith(".localhost"):
                return None
            host = headers.get(b"host")
            if host is not None and parts.netloc == host.decode("latin-1").strip().lower():
                return None  # the same origin: a page Hilo served (the /docs UI)
        return (f"a browser page at {origin_text!r} may not call Hilo: only pages on this "
                "machine may. To allow that site, add its origin to [server] allowed_origins "
                "(HILO_SERVER_ALLOWED_ORIGINS)")

    # -- who sends it

    @staticmethod
    def _presented(scope: dict, headers: dict[bytes, bytes]) -> bytes:
        """The token a request presents: its bearer token, or on the page its cookie's."""
        scheme, _, presented = headers.get(b"authorization", b"").partition(b" ")
        presented = presented.strip() if scheme.lower() == b"bearer" else b""
        if not presented and _under(scope["path"], PAGE_PREFIX):
            presented = _cookie(headers, TOKEN_COOKIE)
        return presented

    def _authenticate(self, scope: dict, presented: bytes) -> bool:
        """True when the request may go on; a per-user token's user goes in the scope."""
        if self.token and presented and hmac.compare_digest(presented, self.token):
            return True
        if presented.startswith(TOKEN_PREFIX.encode()):
            user = token_user(self._reader(), presented.decode("latin-1"))
            if user is not None:
                scope[TOKEN_USER] = user
                return True
        return not self.token and not tokens_in_use(self._reader())

    def _reader(self) -> apsw.Connection:
        # Requests are gated on the event loop's thread; one read-only connection each.
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = connect_readonly(self.db_path)
        return con

    async def _guessing(self, scope: dict, receive: Any, send: Any, address: str,
                        wait: float) -> None:
        seconds = math.ceil(wait)
        if address not in self._limited:
            if len(self._limited) >= WRONG_TOKEN_ADDRESSES:
                self._limited.clear()
            self._limited.add(address)
            log.warning("gate.wrong_tokens_limited", client=address, burst=WRONG_TOKEN_BURST,
                        retry_after=seconds)
        await error_response(
            scope["path"], 429, f"too many wrong tokens from {address or 'this address'}: "
            f"no token is checked from it for {seconds} s; send the right one then",
            "too_many_wrong_tokens", {"Retry-After": str(seconds)})(scope, receive, send)

    # -- its size

    async def _too_large(self, scope: dict, receive: Any, send: Any, size: int | None) -> None:
        size_text = f"{size} bytes" if size is not None else "larger than that"
        message = (f"the request body is {size_text}; Hilo accepts at most "
                   f"{self.max_body} bytes — send less history or shorter messages")
        await error_response(scope["path"], 413, message, "body_too_large")(scope, receive, send)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def _is_page(scope: dict, headers: dict[bytes, bytes]) -> bool:
    """A browser asking for the memory page (or for / with HTML, which leads there)."""
    return scope["method"] in SAFE_METHODS and (
        _under(scope["path"], PAGE_PREFIX)
        or (scope["path"] == "/" and b"text/html" in headers.get(b"accept", b"")))


def _cookie(headers: dict[bytes, bytes], name: str) -> bytes:
    """A cookie's value; the memory page percent-encodes the token it stores."""
    for pair in headers.get(b"cookie", b"").split(b";"):
        key, _, value = pair.strip().partition(b"=")
        if key == name.encode():
            return unquote_to_bytes(value.strip())
    return b""


async def _sign_in_first(scope: dict, receive: Any, send: Any) -> None:
    """To the sign-in page; `refused` when the cookie's token is no longer accepted."""
    refused = bool(_cookie(dict(scope["headers"]), TOKEN_COOKIE))
    location = "/ui/login" + ("?refused=1" if refused else "")
    await send({"type": "http.response.start", "status": 303,
                "headers": [(b"location", location.encode()), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
