"""What an export or an import must never do: remove a person's notes, write through a link,
replace a file unasked, read outside the folder it was given, or stop for one bad record."""

from __future__ import annotations

import json
import sqlite3
import uuid

import pytest

from app.db import connect_readonly
from app.memory import delete_fact, list_facts
from app.ops.transfer import (
    TransferError,
    export_jsonl,
    export_markdown,
    import_kinder_agent,
    import_path,
)
from tests.fixtures.memory import full_state, memory_state, populate_memory
from tests.ops.test_transfer import db

# 474 bytes that a YAML loader honouring aliases expands to 9**9 strings.
BILLION_LAUGHS = """---
category: fact
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
key: [*h,*h,*h,*h,*h,*h,*h,*h,*h]
---

lol
"""


def problems_of(report) -> dict[str, str]:
    """{where: why} of each skipped part of the input."""
    return dict(problem.split(": ", 1) for problem in report.problems)


# -- the export removes only what it wrote --------------------------------------------------


def test_exporting_into_a_vault_leaves_its_notes_with_an_id_alone(config, populated, tmp_path):
    vault = tmp_path / "vault"
    (vault / "facts").mkdir(parents=True)
    (vault / "cards").mkdir()
    reading = "---\nid: 42\ntags: [books]\n---\n\nBooks to read this winter.\n"
    (vault / "facts" / "reading-list.md").write_text(reading)
    (vault / "cards" / "stand-up.md").write_text("---\nid: abc\n---\n\nStand-up notes.\n")

    export_markdown(config, "ana", vault)
    report = export_markdown(config, "ana", vault)  # and again, as a person would

    assert (vault / "facts" / "reading-list.md").read_text() == reading
    assert (vault / "cards" / "stand-up.md").exists()
    assert report.removed_stale == 0


def test_the_manifest_lists_each_file_the_export_wrote_with_its_hash(config, populated, tmp_path):
    import hashlib

    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    manifest = json.loads((out / ".hilo-export.json").read_text())
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.md"))
    assert sorted(manifest["files"]) == written and manifest["user_id"] == "ana"
    assert all(manifest["files"][name] == hashlib.sha256((out / name).read_bytes()).hexdigest()
               for name in written)


def test_a_file_hilo_wrote_and_a_person_changed_is_kept_when_its_fact_is_gone(
        config, writer, tmp_path):
    populate_memory(writer, config)
    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    solution = next((out / "facts").glob("*-solution-*.md"))
    solution.write_text(solution.read_text() + "\nMy own remark on this.\n")
    fact = next(f for f in list_facts(connect_readonly(db(config)), "ana") if f.category == "solution")
    writer.submit(lambda con: delete_fact(con, "ana", fact.id))

    report = export_markdown(config, "ana", out)

    assert "My own remark on this." in solution.read_text()
    assert report.removed_stale == 0 and report.kept_changed == (f"facts/{solution.name}",)
    assert f"Kept facts/{solution.name}" in report.summary()


# -- the export replaces nothing unasked and writes through no link ---------------------------


def test_jsonl_export_refuses_to_replace_an_existing_file_without_overwrite(
        config, populated, tmp_path):
    out = tmp_path / "ana.jsonl"
    out.write_text("my own notes\n")
    with pytest.raises(TransferError, match="already exists.*--overwrite"):
        export_jsonl(config, "ana", out)
    assert out.read_text() == "my own notes\n"

    export_jsonl(config, "ana", out, overwrite=True)
    assert json.loads(out.read_text().splitlines()[0])["type"] == "header"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")) == []


def test_jsonl_export_never_writes_through_a_planted_partial_link(config, populated, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / ".ana.jsonl.partial").symlink_to(victim)

    export_jsonl(config, "ana", tmp_path / "ana.jsonl")

    assert victim.read_text() == "precious\n"
    out = tmp_path / "ana.jsonl"
    assert not out.is_symlink() and json.loads(out.read_text().splitlines()[0])["type"] == "header"


def test_markdown_export_never_writes_through_a_planted_partial_link(config, populated, tmp_path):
    export_markdown(config, "ana", tmp_path / "probe")  # to learn the names it writes
    names = [p.relative_to(tmp_path / "probe") for p in (tmp_path / "probe").rglob("*.md")]
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "notes"
    for name in names:
        (out / name.parent).mkdir(parents=True, exist_ok=True)
        (out / name.parent / f".{name.name}.partial").symlink_to(victim)

    export_markdown(config, "ana", out)

    assert victim.read_text() == "precious\n"
    assert all((out / name).is_file() and not (out / name).is_symlink() for name in names)


def test_markdown_export_refuses_to_replace_a_persons_file_without_overwrite(
        config, populated, tmp_path):
    export_markdown(config, "ana", tmp_path / "probe")
    editor = next((tmp_path / "probe" / "facts").glob("*-preference-editor.md")).name
    out = tmp_path / "notes"
    (out / "facts").mkdir(parents=True)
    (out / "facts" / editor).write_text("My own note about editors.\n")

    with pytest.raises(TransferError, match=f"did not write.*{editor}.*--overwrite"):
        export_markdown(config, "ana", out)
    assert (out / "facts" / editor).read_text() == "My own note about editors.\n"
    assert not (out / "profile.md").exists()  # nothing written at all

    export_markdown(config, "ana", out, overwrite=True)
    assert (out / "facts" / editor).read_text() == (tmp_path / "probe" / "facts" / editor).read_text()


def test_markdown_export_refuses_to_replace_a_file_a_person_edited_since(config, populated, tmp_path):
    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    editor = next((out / "facts").glob("*-preference-editor.md"))
    edited = editor.read_text().replace("neovim with a dark theme", "helix")
    editor.write_text(edited)

    with pytest.raises(TransferError, match="changed since"):
        export_markdown(config, "ana", out)
    assert editor.read_text() == edited

    export_markdown(config, "ana", out, overwrite=True)
    assert "neovim with a dark theme" in editor.read_text()


# -- the import reads only the folder's own files -----------------------------------------------


def test_a_symbolic_link_in_an_import_folder_is_skipped_not_followed(
        config, populated, empty, tmp_path):
    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    secret = tmp_path / "secret.md"
    secret.write_text("---\ncategory: fact\nkey: leaked\n---\n\nTOP SECRET\n")
    (out / "cards" / "x.md").symlink_to(secret)
    (out / "facts" / "y.md").symlink_to(secret)

    report = import_path(empty, out, "ana")

    assert memory_state(db(empty), "ana") == memory_state(db(config), "ana")
    assert problems_of(report) == {"cards/x.md": "a symbolic link, not followed",
                                   "facts/y.md": "a symbolic link, not followed"}


def test_a_linked_folder_in_an_import_folder_is_not_entered(config, populated, empty, tmp_path):
    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "z.md").write_text("---\ncategory: fact\nkey: leaked\n---\n\nTOP SECRET\n")
    for fact in (out / "facts").iterdir():
        fact.unlink()
    (out / "facts").rmdir()
    (out / "facts").symlink_to(elsewhere, target_is_directory=True)

    report = import_path(empty, out, "ana")

    assert problems_of(report) == {"facts/": "a symbolic link, not followed"}
    con = connect_readonly(db(empty))
    assert con.execute("SELECT count(*) FROM facts WHERE value LIKE '%SECRET%'").fetchone() == (0,)
    assert report.added["profile"] == 5 and report.added["card"] == 1  # a tombstone too


def test_a_folder_named_like_a_note_is_skipped_and_the_rest_imported(
        config, populated, empty, tmp_path):
    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    (out / "facts" / "x.md").mkdir()

    report = import_path(empty, out, "ana")

    assert problems_of(report) == {"facts/x.md": "not a regular file"}
    assert memory_state(db(empty), "ana") == memory_state(db(config), "ana")


def test_a_billion_laughs_front_matter_is_refused_and_the_rest_imported(
        config, populated, empty, tmp_path):
    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    (out / "facts" / "lol.md").write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS.encode()) < 500

    report = import_path(empty, out, "ana")

    assert memory_state(db(empty), "ana") == memory_state(db(config), "ana")
    (where, why), = problems_of(report).items()
    assert where == "facts/lol.md" and "aliases are not allowed" in why


def test_front_matter_nested_too_deeply_or_too_large_is_refused_and_the_rest_imported(
        config, populated, empty, tmp_path):
    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    (out / "facts" / "deep.md").write_text("---\nkey: " + "[" * 5000 + "]" * 5000 + "\n---\n\nx\n")
    (out / "facts" / "wide.md").write_text("---\nkey: k\nnote: " + "x" * 1_100_000 + "\n---\n\nx\n")
    (out / "cards" / "huge.md").write_text("---\nkeywords: big\n---\n\n" + "y" * 9_000_000 + "\n")

    report = import_path(empty, out, "ana")

    assert memory_state(db(empty), "ana") == memory_state(db(config), "ana")
    problems = problems_of(report)
    assert "nested too deeply" in problems["facts/deep.md"]
    assert "larger than 1024 KiB" in problems["facts/wide.md"]
    assert "larger than 8192 KiB" in problems["cards/huge.md"]


# -- one bad record never stops an import -------------------------------------------------------


def test_a_jsonl_record_with_an_impossible_time_is_skipped_alone(config, populated, empty, tmp_path):
    out = tmp_path / "ana.jsonl"
    export_jsonl(config, "ana", out)
    lines = out.read_text().splitlines()
    bad_times = ["1e20", "-1e20", "1e300", "1e999", "Infinity", "-Infinity", "NaN"]
    for n, when in enumerate(bad_times):
        lines.append(f'{{"type": "event", "uuid": "{uuid.uuid4()}", "session_id": "s9", '
                     f'"role": "user", "content": "hello {n}", "created_at": {when}}}')
    lines.append(json.dumps({"type": "fact", "category": "fact", "key": "big",
                             "value": "numbers", "access_count": 1e300}))
    out.write_text("\n".join(lines) + "\n")

    report = import_path(empty, out, "ana")

    assert full_state(db(empty), "ana") == full_state(db(config), "ana")
    assert len(report.problems) == len(bad_times) + 1
    assert all("event skipped: not a time" in p for p in report.problems[:len(bad_times)])
    assert "fact skipped" in report.problems[-1]


def test_a_jsonl_header_whose_version_is_not_a_number_is_reported_and_the_file_imported(
        config, populated, empty, tmp_path):
    out = tmp_path / "ana.jsonl"
    export_jsonl(config, "ana", out)
    header, *rest = out.read_text().splitlines()
    out.write_text("\n".join([json.dumps({**json.loads(header), "version": "abc"}), *rest]) + "\n")

    report = import_path(empty, out, "ana")

    assert full_state(db(empty), "ana") == full_state(db(config), "ana")
    assert problems_of(report) == {"ana.jsonl line 1": "header version 'abc' is not a number; "
                                                       "read as version 1"}


def test_a_kinder_agent_row_whose_time_does_not_parse_is_skipped_alone(empty, kinder):
    con = sqlite3.connect(kinder.path)
    con.execute("UPDATE messages SET timestamp = 'last tuesday' WHERE id = 3")
    con.execute("UPDATE profile SET updated_at = 'soon' WHERE key = 'name'")
    con.execute("UPDATE facts SET created_at = '2026-13-45 99:00:00' WHERE id = 2")
    con.execute("UPDATE context_cards SET created_at = 'yesterday' WHERE id = 2")
    con.execute("UPDATE diary SET date = '28/11' WHERE id = 1")
    con.commit()
    con.close()

    report = import_kinder_agent(empty, kinder.path, "ana")

    assert {where.split(" row ")[0] for where in problems_of(report)} == {
        "messages", "profile", "facts", "context_cards", "diary"}
    assert all(why.startswith("not a time") for why in problems_of(report).values())
    assert report.added["event"] == kinder.messages - 1
    assert report.added["profile"] == 1 and report.added["fact"] == 3
    assert report.added["card"] == 1 and report.added["diary"] == 1


# -- what the CLI prints --------------------------------------------------------------------------


def test_the_reports_say_in_words_what_was_written_and_what_was_skipped(
        config, populated, empty, tmp_path):
    out = tmp_path / "ana.jsonl"
    exported = export_jsonl(config, "ana", out)
    with out.open("a") as lines:
        lines.write("{not json\n")

    report = import_path(empty, out, "ana")

    assert exported.summary() == (
        f"Exported ana's memory to {out}: 2 sessions, 8 events, 1 card, 5 profile keys, "
        "7 facts, 1 diary entry.")
    first, skipped, why = report.summary().splitlines()
    assert first.startswith(f"Imported {out} (jsonl) into ana's memory: added 2 sessions, "
                            "8 events, 1 card, 5 profile keys, 7 facts, 1 diary entry; "
                            "updated nothing;")
    assert skipped == "Skipped 1:" and why.startswith(f"  ana.jsonl line {len(out.read_text().splitlines())}: not JSON")
    assert json.loads(json.dumps(report.to_dict()))["problems"] == report.problems
