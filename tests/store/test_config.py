"""Configuration: defaults, the file, HILO_* overrides, and one-line errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from app.config import Config, ConfigError, load_config

REPO_CONFIG = Path(__file__).resolve().parents[2] / "config.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_repository_config_toml_holds_exactly_the_defaults():
    assert load_config(path=REPO_CONFIG, env={}) == Config()


def test_every_default_passes_its_own_check():
    # Loading takes a default as it is (app.config._check): it must be valid.
    sections = [s for s in dataclasses.fields(Config)
                if dataclasses.is_dataclass(getattr(Config(), s.name))]
    checked = 0
    for section in sections:
        for f in dataclasses.fields(getattr(Config(), section.name)):
            allowed = f.metadata.get("allowed")
            if allowed is not None and f.default is not dataclasses.MISSING:
                assert allowed.check(f.default), f"{section.name}.{f.name}"
                checked += 1
    assert checked > 10


def test_design_defaults():
    c = Config()
    assert (c.memory.window_events, c.memory.compaction_threshold, c.memory.chunk_size) == (6, 16, 8)
    assert (c.memory.facts_k, c.memory.cards_k, c.memory.diary_k) == (4, 2, 1)
    assert c.memory.consolidation_interval_hours == 6
    assert c.memory.working_memory_cap == 50
    assert (c.importance.user, c.importance.assistant, c.importance.tool, c.importance.system) == (
        0.5, 0.5, 0.3, 0.1)
    assert c.llm.num_ctx == 4096 and c.llm.reply_reserve < c.llm.num_ctx
    assert c.queue.backend == "sqlite" and c.embedder.kind == "ollama"


def test_config_is_frozen():
    config = load_config(path=REPO_CONFIG, env={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.llm.url = "http://elsewhere"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.memory = config.memory  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.llm.urls = "http://elsewhere"  # a misspelt key is no way around it
    with pytest.raises(dataclasses.FrozenInstanceError):
        del config.queue.workers
    changed = config.replace(llm={"url": "http://elsewhere:11434"})
    assert (changed.llm.url, config.llm.url) == ("http://elsewhere:11434", Config().llm.url)


def test_environment_overrides_file(tmp_path):
    path = write(tmp_path, '[llm]\nurl = "http://from-file:1"\nnum_ctx = 8192\n')
    c = load_config(path=path, env={"HILO_LLM_URL": "http://from-env:2",
                                    "HILO_MEMORY_WINDOW_EVENTS": "10",
                                    "HILO_IMPORTANCE_USER": "0.9"})
    assert c.llm.url == "http://from-env:2"
    assert c.llm.num_ctx == 8192
    assert c.memory.window_events == 10
    assert c.importance.user == 0.9


def test_data_dir_from_env_and_command_line(tmp_path):
    assert load_config(env={"HILO_DATA_DIR": str(tmp_path / "a")}).data_dir == tmp_path / "a"
    c = load_config(env={"HILO_DATA_DIR": str(tmp_path / "a")}, data_dir=tmp_path / "b")
    assert c.data_dir == tmp_path / "b"


def test_hilo_config_variable_names_the_file(tmp_path):
    path = write(tmp_path, "[memory]\nfacts_k = 7\n")
    assert load_config(env={"HILO_CONFIG": str(path)}).memory.facts_k == 7


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[memory]\nwindow_events = "six"\n', "memory.window_events = 'six' from file"),
        ("[memory]\nwindow_size = 6\n", "memory.window_size from file"),
        ("[memroy]\nwindow_events = 6\n", "[memroy] from file"),
        ("[memory]\nwindow_events = 0\n", "expected a number from 1 to 200"),
        ('[llm]\nprovider = "llamacpp"\n', "expected one of 'ollama', 'openai'"),
        ('[schedule]\ntimezone = "Mars/Olympus"\n', "expected an IANA time zone"),
        ("[llm]\nnum_ctx = 1024\nreply_reserve = 2048\n", "expected less than llm.num_ctx"),
        ("[memory\n", "is not valid TOML"),
    ],
)
def test_bad_file_values_give_one_line_naming_key_and_source(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path=path, env={})
    message = str(err.value)
    assert expected in message
    assert "\n" not in message
    if "TOML" not in expected and "llm.num_ctx" not in expected:
        assert str(path) in message


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"HILO_LLM_NUM_CTX": "lots"}, "llm.num_ctx = 'lots' from environment variable "
                                       "HILO_LLM_NUM_CTX: expected an integer"),
        ({"HILO_IMPORTANCE_USER": "1.5"}, "importance.user = 1.5 from environment variable "
                                          "HILO_IMPORTANCE_USER: expected a number from 0 to 1"),
        ({"HILO_LLM_MODLE": "x"}, "HILO_LLM_MODLE from environment: unknown setting"),
        ({"HILO_QUEUE_BACKEND": "rabbit"}, "expected one of 'sqlite', 'redis'"),
    ],
)
def test_bad_environment_values_give_one_line_naming_variable(env, expected):
    with pytest.raises(ConfigError) as err:
        load_config(env=env)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_variable_suggests_the_close_one():
    with pytest.raises(ConfigError, match="did you mean HILO_LLM_URL"):
        load_config(env={"HILO_LLM_ULR": "http://x"})


def test_an_unknown_variable_like_no_setting_gets_no_suggestion():
    with pytest.raises(ConfigError) as err:
        load_config(env={"HILO_FOO_BAR": "1"})
    assert str(err.value) == ("HILO_FOO_BAR from environment: unknown setting; the variables "
                              "are HILO_<SECTION>_<KEY> for the keys in config.toml")


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(path=tmp_path / "nope.toml", env={})


def test_config_error_stops_the_cli_with_exit_2(capsys, monkeypatch):
    from app.cli import main

    monkeypatch.setenv("HILO_MEMORY_FACTS_K", "-1")
    assert main(["init"]) == 2
    err = capsys.readouterr().err
    assert "memory.facts_k = -1 from environment variable HILO_MEMORY_FACTS_K" in err


def test_scheduled_tasks_tables_are_kept(tmp_path):
    path = write(tmp_path, '[[scheduled_tasks]]\nname = "backups"\nschedule = "every day at 9"\n'
                           'prompt = "check the backups"\n')
    c = load_config(path=path, env={})
    assert c.scheduled_tasks[0]["name"] == "backups"


def test_housekeeping_patterns_are_a_list_in_the_file_or_a_json_array_in_the_environment(tmp_path):
    path = write(tmp_path, "[server]\nhousekeeping_patterns = ['^Summarise', 'title']\n")
    assert load_config(path=path, env={}).server.housekeeping_patterns == ("^Summarise", "title")
    env = {"HILO_SERVER_HOUSEKEEPING_PATTERNS": '["^Only this"]'}
    assert load_config(env=env).server.housekeeping_patterns == ("^Only this",)


@pytest.mark.parametrize("text, expected", [
    ("[server]\nhousekeeping_patterns = '^one'\n", "expected a list of strings"),
    ("[server]\nhousekeeping_patterns = ['(unclosed']\n", "expected a list of regular expressions"),
])
def test_bad_housekeeping_patterns_are_named(tmp_path, text, expected):
    with pytest.raises(ConfigError) as caught:
        load_config(path=write(tmp_path, text), env={})
    assert "server.housekeeping_patterns" in str(caught.value) and expected in str(caught.value)


@pytest.mark.parametrize("pattern", ["", ".*", "^", "|title", "x?", "(?s).", "(|x)"])
def test_a_housekeeping_pattern_matching_every_message_is_refused(tmp_path, pattern):
    # Every request would be housekeeping: Hilo would relay all and store nothing.
    text = f"[server]\nhousekeeping_patterns = ['^### Task:', {pattern!r}]\n"
    with pytest.raises(ConfigError) as caught:
        load_config(path=write(tmp_path, text), env={})
    message = str(caught.value)
    assert message.startswith("server.housekeeping_patterns = ")
    assert "matching every message" in message and "\n" not in message
    env = {"HILO_SERVER_HOUSEKEEPING_PATTERNS": json.dumps([pattern])}
    with pytest.raises(ConfigError, match="HILO_SERVER_HOUSEKEEPING_PATTERNS"):
        load_config(env=env)


@pytest.mark.parametrize("key", ["terminal_allowed_prefixes", "terminal_allow_rules"])
@pytest.mark.parametrize("command", ["ls; rm", "cat $HOME", "git log | head", "echo `id`",
                                     "du -sh > out", "echo 'unclosed"])
def test_a_terminal_rule_that_could_never_match_is_refused(tmp_path, key, command):
    # No command holding a shell character is ever covered: such a rule never applies.
    text = f"[tools]\n{key} = ['df -h', {command!r}]\n"
    with pytest.raises(ConfigError) as caught:
        load_config(path=write(tmp_path, text), env={})
    message = str(caught.value)
    assert message.startswith(f"tools.{key} = ") and "shell character" in message
    assert "\n" not in message


def test_terminal_rules_of_plain_words_and_placeholders_are_kept(tmp_path):
    text = ("[tools]\nterminal_allowed_prefixes = ['df -h', \"git log --oneline\"]\n"
            "terminal_allow_rules = ['cat <path>', 'ls *', \"grep 'two words' <path>\"]\n")
    tools = load_config(path=write(tmp_path, text), env={}).tools
    assert tools.terminal_allowed_prefixes == ("df -h", "git log --oneline")
    assert tools.terminal_allow_rules == ("cat <path>", "ls *", "grep 'two words' <path>")


def test_fill_first_message_takes_auto_or_a_switch_as_it_always_did(tmp_path):
    assert load_config(env={}).memory.fill_first_message == "auto"
    for written, read in (("true", "true"), ("false", "false"), ('"Auto"', "auto")):
        path = write(tmp_path, f"[memory]\nfill_first_message = {written}\n")
        assert load_config(path=path, env={}).memory.fill_first_message == read
    assert load_config(env={"HILO_MEMORY_FILL_FIRST_MESSAGE": "true"}).memory.fill_first_message \
        == "true"
    path = write(tmp_path, '[memory]\nfill_first_message = "sometimes"\n')
    with pytest.raises(ConfigError, match="memory.fill_first_message = 'sometimes'.*'auto'"):
        load_config(path=path, env={})
