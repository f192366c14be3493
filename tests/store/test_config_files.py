"""The configuration a new user writes: OLLAMA_HOST-style URLs, every bad value as one
line (never a traceback), the file found where people keep it, and `hilo doctor`
saying which file and data directory it used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import Config, ConfigError, load_config, system_timezone
from tests.fake_ollama import unused_loopback_url

HILO = str(Path(sys.executable).with_name("hilo"))


def hilo(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None
         ) -> subprocess.CompletedProcess:
    """The installed `hilo`, as a user runs it (the test's HILO_* variables left out)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    full_env.update(env or {})
    return subprocess.run([HILO, *args], capture_output=True, text=True, env=full_env,
                          cwd=cwd, timeout=60)


# -- [llm] url as OLLAMA_HOST is written ---------------------------------------------------


@pytest.mark.parametrize("written, meant", [
    ("localhost:11434", "http://localhost:11434"),
    (":11434", "http://127.0.0.1:11434"),
    ("0.0.0.0", "http://0.0.0.0:11434"),
    ("gpu-box", "http://gpu-box:11434"),
    ("gpu-box:8080/ollama/", "http://gpu-box:8080/ollama"),
    ("[::1]:11500", "http://[::1]:11500"),
    ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
    ("https://models.example.org/", "https://models.example.org"),
])
def test_the_model_url_is_read_as_ollama_reads_ollama_host(written, meant):
    assert load_config(env={"HILO_LLM_URL": written}).llm.url == meant


def test_a_bare_host_and_port_in_the_file_is_read_the_same_way(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[llm]\nurl = "localhost:11500"\n', encoding="utf-8")
    assert load_config(path=path, env={}).llm.url == "http://localhost:11500"


# -- every invalid value: one line ---------------------------------------------------------


@pytest.mark.parametrize("var, value, expected", [
    ("HILO_LLM_URL", "localhost:abc", "the port is a number"),
    ("HILO_LLM_URL", "localhost:99999", "the port is a number"),
    ("HILO_LLM_URL", "ftp://models", "not ftp://"),
    ("HILO_LLM_URL", "http://", "names no host"),
    ("HILO_LLM_URL", "local host:11434", "no spaces"),
    ("HILO_LLM_URL", "http://h:1/?x=1", "no ?query"),
    ("HILO_LLM_KEEP_ALIVE", "forever", 'a duration such as "5m"'),
    ("HILO_LLM_CHAT_MODEL", " ", "a non-empty string"),
    ("HILO_LLM_DISTILL_MODEL", "", "a non-empty string"),
    ("HILO_EMBEDDER_MODEL", "", "a non-empty string"),
    ("HILO_LLM_API_KEY", "sk-\nx", "printable characters only"),
    ("HILO_QUEUE_REDIS_URL", "localhost:6379", "redis://"),
    ("HILO_QUEUE_REDIS_URL", "redis://h:port/0", "redis://"),
    ("HILO_SERVER_HOST", "", "a non-empty string"),
    ("HILO_SERVER_TOKEN", "abc\tdef", "printable characters only"),
    ("HILO_MEMORY_USER_ID", "", "a non-empty string"),
    ("HILO_DATA_DIR", "", "a non-empty string"),
    ("HILO_SCHEDULE_TIMEZONE", "Mars/Olympus", "an IANA time zone"),
    ("HILO_SERVER_PORT", "nan", "expected an integer"),
    ("HILO_LLM_TEMPERATURE", "nan", "expected a number from 0 to 2"),
])
def test_every_invalid_value_is_one_line_naming_the_variable(var, value, expected):
    with pytest.raises(ConfigError) as refused:
        load_config(env={var: value})
    message = str(refused.value)
    assert expected in message and var in message
    assert "\n" not in message


@pytest.mark.parametrize("make, expected", [
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.write_bytes(b"[llm]\nurl = '\xff'\n"), "is not UTF-8"),
])
def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path, make, expected):
    path = tmp_path / "config.toml"
    make(path)
    with pytest.raises(ConfigError, match=expected):
        load_config(env={"HILO_CONFIG": str(path)})


@pytest.mark.parametrize("url", ["localhost:abc", "ftp://x", "http://", "a b"])
@pytest.mark.parametrize("command", ["doctor", "init"])
def test_the_cli_gives_bad_urls_one_line_and_exit_2(tmp_path, command, url):
    result = hilo(command, "--data-dir", str(tmp_path / "d"), env={"HILO_LLM_URL": url})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("hilo: configuration error: llm.url")


def test_doctor_reaches_a_model_server_written_as_host_and_port(tmp_path, fake_ollama):
    port = fake_ollama.url.rsplit(":", 1)[1]
    data = tmp_path / "d"
    assert hilo("init", "--data-dir", str(data), env={"HILO_LLM_URL": f"localhost:{port}"}
                ).returncode == 0
    result = hilo("doctor", "--data-dir", str(data), "--json",
                  env={"HILO_LLM_URL": f"localhost:{port}"})
    assert result.returncode == 0, result.stderr
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["model server"]["status"] == "OK"
    assert f"http://localhost:{port}" in checks["model server"]["detail"]


# -- where the file is found, and doctor saying so -----------------------------------------


def test_the_file_in_the_current_folder_comes_first(tmp_path, monkeypatch):
    (tmp_path / "config.toml").write_text("[memory]\nfacts_k = 7\n")
    user = tmp_path / "xdg" / "hilo"
    user.mkdir(parents=True)
    (user / "config.toml").write_text("[memory]\nfacts_k = 9\n")
    monkeypatch.chdir(tmp_path)
    config = load_config(env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert config.memory.facts_k == 7
    assert config.origin.file == tmp_path / "config.toml"
    assert config.origin.file_found_by == "the current folder"


def test_elsewhere_the_users_config_folder_is_read(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    xdg = tmp_path / "xdg" / "hilo"
    xdg.mkdir(parents=True)
    (xdg / "config.toml").write_text("[memory]\nfacts_k = 9\n")
    assert load_config(env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")}).memory.facts_k == 9
    # Without XDG_CONFIG_HOME: ~/.config/hilo/config.toml.
    home_config = Path.home() / ".config" / "hilo"
    home_config.mkdir(parents=True)
    (home_config / "config.toml").write_text("[memory]\nfacts_k = 3\n")
    config = load_config(env={})
    assert config.memory.facts_k == 3
    assert config.origin.file == home_config / "config.toml"
    assert config.origin.file_found_by == "the user's config folder"


def test_with_no_file_anywhere_the_defaults_are_used_and_the_places_recorded(tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(env={})
    assert config == Config()
    assert config.origin.file is None
    assert tmp_path / "config.toml" in config.origin.searched
    assert config.origin.data_dir_from == "the built-in default"


def _doctor_lines(result: subprocess.CompletedProcess) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in json.loads(result.stdout)["checks"]}


def test_doctor_names_the_config_file_and_the_data_directory_it_used(tmp_path):
    home = tmp_path / "home"
    user_file = home / ".config" / "hilo" / "config.toml"
    user_file.parent.mkdir(parents=True)
    data = tmp_path / "from-user-file"
    user_file.write_text(f'[data]\ndir = "{data}"\n[llm]\nurl = "{unused_loopback_url()}"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": ""}
    hilo("init", env=env, cwd=elsewhere)
    checks = _doctor_lines(hilo("doctor", "--json", env=env, cwd=elsewhere))
    assert checks["configuration"] == f"{user_file} (from the user's config folder)"
    assert checks["data directory"] == f"{data} (from file {user_file})"

    user_file.unlink()
    checks = _doctor_lines(hilo("doctor", "--json", env={**env, "HILO_DATA_DIR": str(data)},
                                cwd=elsewhere))
    assert checks["configuration"].startswith("built-in defaults")
    assert str(elsewhere / "config.toml") in checks["configuration"]
    assert checks["data directory"] == f"{data} (from environment variable HILO_DATA_DIR)"


def test_doctor_prints_the_config_file_in_words(tmp_path):
    (tmp_path / "config.toml").write_text(f'[llm]\nurl = "{unused_loopback_url()}"\n')
    result = hilo("doctor", "--data-dir", str(tmp_path / "d"), cwd=tmp_path)
    assert f"configuration: {tmp_path / 'config.toml'} (from the current folder)" in result.stdout
    assert f"data directory: {tmp_path / 'd'} (from --data-dir)" in result.stdout


# -- the time zone: this machine's -----------------------------------------------------------


def test_the_schedule_zone_defaults_to_the_machines(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Lisbon")
    assert Config().schedule.timezone == "Europe/Lisbon"
    assert load_config(env={}).schedule.timezone == "Europe/Lisbon"
    assert load_config(env={"HILO_SCHEDULE_TIMEZONE": "Asia/Tokyo"}).schedule.timezone == \
        "Asia/Tokyo"


def test_the_machines_zone_comes_from_tz_then_etc_timezone_then_the_localtime_link(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    assert system_timezone({}, root=tmp_path) == "UTC"
    zoneinfo = tmp_path / "usr" / "share" / "zoneinfo" / "America"
    zoneinfo.mkdir(parents=True)
    (zoneinfo / "New_York").write_bytes(b"TZif")
    (etc / "localtime").symlink_to(zoneinfo / "New_York")
    assert system_timezone({}, root=tmp_path) == "America/New_York"
    (etc / "timezone").write_text("Europe/Madrid\n")
    assert system_timezone({}, root=tmp_path) == "Europe/Madrid"
    assert system_timezone({"TZ": ":/usr/share/zoneinfo/Asia/Tokyo"}, root=tmp_path) == \
        "Asia/Tokyo"
    assert system_timezone({"TZ": "Not/AZone"}, root=tmp_path) == "Europe/Madrid"
