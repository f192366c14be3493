"""One error family: every failure Hilo explains is a HiloError, and each front-end maps
the family in one place (exit status on the command line, HTTP status over HTTP)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from fastapi.testclient import TestClient

import app
import workers
from app.errors import HiloError, InvalidInput, NotFound, Unavailable


def project_exceptions() -> list[type[BaseException]]:
    found = []
    for package in (app, workers):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            found += [obj for _, obj in inspect.getmembers(module, inspect.isclass)
                      if issubclass(obj, BaseException) and obj.__module__ == module.__name__]
    return found


def test_every_error_hilo_defines_belongs_to_the_family() -> None:
    strays = [f"{cls.__module__}.{cls.__name__}" for cls in project_exceptions()
              if not issubclass(cls, HiloError)]
    assert strays == []


def test_each_branch_says_how_a_front_end_reports_it() -> None:
    assert (InvalidInput.http_status, NotFound.http_status, Unavailable.http_status) == (400, 404, 503)
    assert all(cls.exit_code in (1, 2) for cls in project_exceptions())


def test_the_cli_shows_any_family_member_as_one_line(config, data_dir, capsys) -> None:
    from app.cli import main

    status = main(["tasks", "pause", "no-such-task", "--data-dir", str(data_dir)])
    err = capsys.readouterr().err
    assert status == 1
    assert err.startswith("hilo tasks: ") and "Traceback" not in err and err.count("\n") == 1


def test_the_http_front_end_answers_a_domain_error_with_its_status(config, data_dir,
                                                                    fake_ollama) -> None:
    from dataclasses import replace

    from app.serve import create_app

    config = replace(config, llm=replace(config.llm, url=fake_ollama.url))
    with TestClient(create_app(config)) as client:
        missing = client.post("/memory/tasks/no-such-task/pause")
        invalid = client.post("/memory/tasks", json={"schedule": "whenever", "prompt": "x"})
    assert missing.status_code == 404 and "no-such-task" in missing.json()["error"]
    assert invalid.status_code == 400 and invalid.json()["error"]


@pytest.mark.parametrize("model_error, status", [
    ("ModelNotFound", 404), ("ModelUnreachable", 503), ("ModelTimeout", 504),
    ("StreamInterrupted", 502)])
def test_model_failures_carry_their_http_status(model_error: str, status: int) -> None:
    import app.model.errors as model_errors

    assert getattr(model_errors, model_error).http_status == status


def test_a_model_server_rejection_is_passed_on_but_its_auth_failure_is_a_bad_gateway() -> None:
    from app.model.errors import ModelHTTPError

    assert ModelHTTPError(400, "bad", "http://x", "/api/chat").http_status == 400
    assert ModelHTTPError(401, "no", "http://x", "/api/chat").http_status == 502
    assert ModelHTTPError(500, "boom", "http://x", "/api/chat").http_status == 502


def drawn_family_tree() -> set[tuple[str, str]]:
    """(parent, child) for each line of the tree app/errors.py's docstring ends with,
    where a child stands four spaces further in than its parent."""
    import app.errors

    doc = app.errors.__doc__ or ""
    drawn = doc[doc.index("    HiloError "):].rstrip().splitlines()
    edges, parents = set(), []
    for line in drawn:
        depth = (len(line) - len(line.lstrip())) // 4 - 1
        name = line.split()[0]
        del parents[depth:]
        if parents:
            edges.add((parents[-1], name))
        parents.append(name)
    return edges


def test_the_tree_app_errors_draws_is_the_whole_family() -> None:
    """A newcomer reads the family in one place, as httpx's _exceptions.py opens with it."""
    family = [cls for cls in project_exceptions() if issubclass(cls, HiloError)]
    real = {(base.__name__, cls.__name__) for cls in family for base in cls.__bases__
            if issubclass(base, HiloError)}
    assert drawn_family_tree() == real
