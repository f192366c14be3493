"""Fuzzing every HTTP route and every `hilo` command that takes input: never a 500, never a
traceback.

The routes come from the app's own OpenAPI document, so a new route is fuzzed without
touching this file. Each request gets odd bodies (junk JSON of every type, lone surrogates
in JSON escapes, huge numbers, deep nesting, bytes that are not JSON, nothing at all),
odd query strings, headers and path parameters. Each command gets odd arguments and
options, built from its click parameters. The model is the fake one (tests/fake_ollama.py).
"""

from __future__ import annotations

import contextlib
import json
import string
import tempfile
from collections import Counter
from typing import Any
from urllib.parse import quote

import click
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import hilo as hilo_command
from app.serve import create_app

EXAMPLES = 25
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])
# Inputs tried, by test (printed with -s; BENCHMARKS.md reports the sum).
TRIED: Counter[str] = Counter()

# -- odd values ----------------------------------------------------------------------------

ODD_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(codec="utf-8"), max_size=40),  # any code point
    st.sampled_from(["", " ", "\x00", "\x00\x00", "\u202e", "\ufeff", "𝔘𝔫𝔦", "e\u0301", "..",
                     "../../etc/passwd", "%00", "%ff", "\n\r", "\\", "'; DROP TABLE events;--",
                     "NOT", "AND OR", '"', "*", "^", "NEAR(", "a" * 5000, "\U0010ffff",
                     "\udcff", "\ud800"]),
)
HUGE_NUMBERS = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -1, 0, 1e308, -1e308,
                                5e-324, 1e20, 2**53 + 1])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), HUGE_NUMBERS,
                    st.floats(allow_nan=False, allow_infinity=False), ODD_TEXT)
JUNK = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(ODD_TEXT, inner, max_size=4)), max_leaves=12)

# Where junk goes: the fields the routes read, so the fuzz gets past the first check.
FIELDS = ["model", "messages", "role", "content", "stream", "options", "format", "tools",
          "tool_calls", "tool_name", "tool_call_id", "images", "keep_alive", "max_tokens",
          "temperature", "response_format", "name", "schedule", "prompt", "oneshot",
          "trusted", "value", "key", "category", "session_id", "text", "type", "query",
          "budget", "limit", "user_id", "events", "image_url"]


def message() -> st.SearchStrategy[Any]:
    role = st.sampled_from(["user", "assistant", "system", "tool", "", "robot"])
    content = st.one_of(ODD_TEXT, JUNK, st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "x"]), "text": JUNK}), max_size=3))
    return st.one_of(st.fixed_dictionaries({"role": role, "content": content}), JUNK)


def plausible_body() -> st.SearchStrategy[Any]:
    """A body near one a route accepts, with junk in some of its fields."""
    base = st.fixed_dictionaries({
        "model": st.one_of(st.just("gemma3:4b"), JUNK),
        "messages": st.one_of(st.lists(message(), max_size=4), JUNK),
        "stream": st.one_of(st.booleans(), JUNK),
    }, optional={field: JUNK for field in FIELDS if field not in ("model", "messages", "stream")})
    return st.one_of(base, st.dictionaries(st.sampled_from(FIELDS), JUNK, max_size=6), JUNK)


def lone_surrogate_bytes(value: Any) -> bytes:
    """The JSON of `value` with a lone surrogate escape in its first string (or at the end)."""
    text = json.dumps(value)
    at = text.find('"')
    if at < 0:
        return json.dumps({"content": "\\ud800"}).replace("\\\\", "\\").encode()
    return (text[:at + 1] + "\\ud800\\udfff\\udc00" + text[at + 1:]).encode()


RAW_BODIES = st.one_of(
    st.sampled_from([b"", b"{", b"[]", b"null", b"0", b'"x"', b"\xff\xfe", b"{}" * 3,
                     b'{"model": "gemma3:4b", "messages": [{"role": "user", "content": "\\ud800"}]}',
                     b'{"model": "gemma3:4b", "messages": [{"role": "user", "content": "\\u0000"}]}',
                     b'{"a": NaN}', b'{"a": Infinity}', b'{"a": -Infinity}', b"1" * 5000,
                     b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000]),
    st.binary(max_size=64),
    plausible_body().map(lone_surrogate_bytes),
)
BODIES = st.one_of(plausible_body().map(lambda v: json.dumps(v).encode()), RAW_BODIES)

HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                    blacklist_characters="\x7f"), max_size=300)
HEADERS = st.fixed_dictionaries({}, optional={  # values as the bytes a client sends
    "X-Hilo-User": HEADER_TEXT, "X-Hilo-Session": HEADER_TEXT,
    "Content-Type": st.sampled_from(["application/json", "text/plain", "", "multipart/form-data",
                                     "application/x-www-form-urlencoded"]),
    "Accept": HEADER_TEXT, "Origin": HEADER_TEXT, "Authorization": HEADER_TEXT})
QUERY = st.dictionaries(st.sampled_from(["q", "limit", "explain", "category", "history",
                                         "with_sources", "session", "x"]),
                        st.one_of(ODD_TEXT, HUGE_NUMBERS.map(str)), max_size=4)
PATH_PARAM = st.one_of(ODD_TEXT, HUGE_NUMBERS.map(str), st.integers().map(str))


def encoded(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


# -- HTTP ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory, fake_ollama_module):
    from app.config import load_config
    from app.datadir import DataDir
    from tests.conftest import REPO_ROOT

    config = load_config(path=REPO_ROOT / "config.toml", env={},
                         data_dir=tmp_path_factory.mktemp("fuzz") / "data")
    config = config.replace(llm={"url": fake_ollama_module.url})
    DataDir.of(config).init()
    with TestClient(create_app(config), base_url="http://localhost",
                    raise_server_exceptions=False) as test_client:
        yield test_client
    print(f"\nfuzz inputs tried: {dict(TRIED)}, total {sum(TRIED.values())}")


@pytest.fixture(scope="module")
def fake_ollama_module():
    from tests.fake_ollama import FakeOllama

    with FakeOllama() as fake:
        yield fake


def operations() -> list[tuple[str, str, bool]]:
    """Every route: (method, path, whether Hilo relays it to the model server unchanged)."""
    from types import SimpleNamespace

    from starlette.datastructures import State

    from app.config import load_config
    from app.serve.documented import documented_api

    config = load_config(env={})
    # Routes only; never served.
    state = State({"config": config, "service": SimpleNamespace(config=config)})
    return [(method.upper(), path, "relayed" in op.get("summary", ""))
            for path, ops in documented_api(state).openapi()["paths"].items()
            for method, op in ops.items()]


OPERATIONS = [pytest.param(method, path, relayed, id=f"{method} {path}")
              for method, path, relayed in operations()]


def assert_no_500(response: Any, what: str) -> None:
    assert response.status_code != 500, f"{what}: {response.status_code} {response.text[:500]}"
    assert "Traceback" not in response.text, f"{what}: {response.text[:500]}"


@pytest.mark.parametrize(("method", "path", "relayed"), OPERATIONS)
@FUZZ
@given(data=st.data())
def test_no_route_answers_500_or_a_traceback(client, method, path, relayed, data):
    filled = path
    while "{" in filled:
        name = filled[filled.index("{") + 1:filled.index("}")]
        value = data.draw(PATH_PARAM, label=name) or "x"
        filled = filled.replace("{" + name + "}", encoded(value), 1)
    query = "&".join(f"{encoded(k)}={encoded(v)}" for k, v in data.draw(QUERY, label="query").items())
    headers = {k: v.encode("latin-1") for k, v in data.draw(HEADERS, label="headers").items()}
    body = data.draw(BODIES, label="body") if method in ("POST", "PUT", "PATCH") else None
    url = filled + (f"?{query}" if query else "")

    response = client.request(method, url, content=body, headers=headers)

    TRIED["http"] += 1
    if relayed:
        # The model server's own answer, passed on with its status and body (issue 11): a
        # 500 there is the fake model server's error, relayed; never a traceback of Hilo's.
        assert "Traceback" not in response.text, f"{method} {url}: {response.text[:500]}"
    else:
        assert_no_500(response, f"{method} {url}")


# -- the command line ----------------------------------------------------------------------

# Long-running: their flags are typed by click and checked before anything starts.
NOT_FUZZED = {("serve",), ("worker",)}
SAFE_NAME = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=12)
ARG_TEXT = st.one_of(ODD_TEXT.filter(lambda s: "\x00" not in s), HUGE_NUMBERS.map(str))


def commands(group: click.Group = hilo_command, prefix: tuple[str, ...] = ()) -> list:
    found = []
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if isinstance(command, click.Group):
            found += commands(command, (*prefix, name))
        elif (*prefix, name) not in NOT_FUZZED:
            found.append(((*prefix, name), command))
    return found


def value_for(param: click.Parameter) -> st.SearchStrategy[str]:
    if isinstance(param.type, click.Path):
        return st.one_of(SAFE_NAME, st.sampled_from([".", "..", "data", "data/memory.sqlite3"]))
    if isinstance(param.type, click.Choice):
        return st.one_of(st.sampled_from(list(param.type.choices)), ARG_TEXT)
    return ARG_TEXT


def argv_for(path: tuple[str, ...], command: click.Command) -> st.SearchStrategy[list[str]]:
    @st.composite
    def build(draw: Any) -> list[str]:
        argv = list(path)
        for param in command.params:
            if param.name in ("data_dir", "config_file"):
                continue
            if isinstance(param, click.Argument):
                count = draw(st.integers(1, 3)) if param.nargs == -1 else param.nargs
                if draw(st.integers(0, 9)) == 0:
                    count = 0  # a missing argument
                argv += [draw(value_for(param)) for _ in range(count)]
            elif draw(st.booleans()):
                flag = param.opts[0]
                argv += [flag] if getattr(param, "is_flag", False) else [flag, draw(value_for(param))]
        return argv
    return build()


COMMANDS = commands()


@pytest.fixture(scope="module")
def cli_config(tmp_path_factory, fake_ollama_module):
    from app.config import load_config
    from app.datadir import DataDir
    from tests.conftest import REPO_ROOT

    config = load_config(path=REPO_ROOT / "config.toml", env={},
                         data_dir=tmp_path_factory.mktemp("fuzz-cli") / "data")
    config = config.replace(llm={"url": fake_ollama_module.url})
    DataDir.of(config).init()
    return config


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(path) for path, _ in COMMANDS])
@FUZZ
@given(data=st.data())
def test_no_command_ends_in_a_traceback(cli_config, command, data, tmp_path_factory):
    path, click_command = command
    argv = data.draw(argv_for(path, click_command), label="argv")
    lines = data.draw(st.lists(ARG_TEXT, max_size=3), label="stdin") if path == ("chat",) else []
    runner = CliRunner()
    # Paths the command writes (exports, backups) land in a fresh directory.
    with contextlib.chdir(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp())):
        result = runner.invoke(hilo_command, argv, obj=cli_config,
                               input="".join(f"{line}\n" for line in lines).encode(
                                   "utf-8", "surrogatepass"))  # bytes, invalid UTF-8 included

    TRIED["cli"] += 1
    unexpected = result.exception if not isinstance(result.exception, SystemExit) else None
    assert unexpected is None, (argv, repr(unexpected), result.output[-500:])
    assert result.exit_code in (0, 1, 2), (argv, result.exit_code, result.output[-500:])
    assert "Traceback" not in result.output, (argv, result.output[-500:])
