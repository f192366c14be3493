"""The `hilo` command as a whole: its help, command lines it cannot parse, and how a
failure reaches the user (one line, an exit status)."""

from __future__ import annotations

import json

from click.testing import CliRunner

import app.ops.doctor
from app.cli import hilo, main

COMMANDS = ["init", "doctor", "chat", "serve", "worker", "backup", "restore", "rebuild",
            "export", "import", "queue", "tasks", "memory"]


def test_help_lists_every_command_in_order(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.strip()]
    assert [name for name in listed if name in COMMANDS] == COMMANDS
    assert "create the data directory, migrate, write a MEMORY.md template" in out


def test_a_command_line_that_does_not_parse_exits_2(capsys):
    assert main(["memory", "facts", "--no-such-flag"]) == 2
    assert "--no-such-flag" in capsys.readouterr().err
    assert main([]) == 2
    assert main(["queue", "retry", "--all-failed", "--limit", "x"]) == 2


def test_a_failure_the_user_can_act_on_is_one_line_naming_the_command(data_dir, capsys):
    assert main(["import", "kinder-agent", "--data-dir", str(data_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.err == "hilo import: usage: hilo import kinder-agent <memory.db>\n"
    assert captured.out == ""


def test_ctrl_c_in_a_command_exits_130(data_dir, monkeypatch, capsys):
    def interrupted(config):
        raise KeyboardInterrupt

    monkeypatch.setattr(app.ops.doctor, "run_checks", interrupted)
    assert main(["doctor", "--data-dir", str(data_dir)]) == 130
    assert capsys.readouterr().err == ""


def test_a_config_given_to_the_group_is_used_as_it_is(config, data_dir):
    elsewhere = config.replace(memory={"user_id": "ana"})
    result = CliRunner().invoke(hilo, ["memory", "profile", "--json"], obj=elsewhere)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []
    result = CliRunner().invoke(hilo, ["tasks", "add", "every day at 9", "check the backups",
                                       "--json"], obj=elsewhere)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["user_id"] == "ana"
