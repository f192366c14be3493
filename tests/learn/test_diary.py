"""diary: one synthesis per ended session; rewritten when a reopened session ends again."""

from __future__ import annotations

from app.learn.diary_entry import DIARY_SCHEMA, write_diary
from tests.workers.support import add_turn, query, snapshot

ENTRY = "The user worked through a list of codes with the assistant."


def test_a_session_gets_one_entry_and_is_marked_ended(job_parts):
    cfg, writer, model, fake = job_parts
    add_turn(writer, cfg, "ana", "s1", "Let us move the backups to S3.", "Sure, here is how.")
    assert write_diary(writer, model, cfg, "ana", "s1") == "written"
    assert query(cfg, "SELECT user_id, session_id, entry, is_extractive FROM diary") == [
        ("ana", "s1", ENTRY, 0)]
    assert query(cfg, "SELECT ended_at IS NOT NULL FROM sessions") == [(1,)]
    body = fake.bodies("/api/generate")[0]
    assert body["format"] == DIARY_SCHEMA
    assert "USER: Let us move the backups to S3." in body["prompt"]


def test_writing_the_diary_twice_leaves_the_same_database(job_parts):
    cfg, writer, model, fake = job_parts
    add_turn(writer, cfg, "ana", "s1", "hello")
    write_diary(writer, model, cfg, "ana", "s1")
    before = snapshot(cfg)
    assert write_diary(writer, model, cfg, "ana", "s1") == "up-to-date"
    assert snapshot(cfg) == before
    assert len(fake.bodies("/api/generate")) == 1


def test_a_reopened_session_gets_its_entry_rewritten(job_parts):
    cfg, writer, model, fake = job_parts
    add_turn(writer, cfg, "ana", "s1", "hello")
    write_diary(writer, model, cfg, "ana", "s1")
    add_turn(writer, cfg, "ana", "s1", "one more thing about the backups")
    fake.script_generate({"entry": "Backups, then one more thing."})
    assert write_diary(writer, model, cfg, "ana", "s1") == "updated"
    assert query(cfg, "SELECT entry FROM diary") == [("Backups, then one more thing.",)]
    assert query(cfg, "SELECT action FROM memory_log WHERE owner_kind = 'diary' ORDER BY id") == [
        ("insert",), ("update",)]


def test_the_prompt_uses_card_summaries_for_compacted_parts(job_parts):
    from app.learn.compact import compact_session

    cfg, writer, model, fake = job_parts
    for n in range(cfg.memory.compaction_threshold // 2 + 1):  # one chunk to compact
        add_turn(writer, cfg, "ana", "s1", f"message {n}")
    compact_session(writer, model, cfg, "ana", "s1")
    write_diary(writer, model, cfg, "ana", "s1")
    prompt = fake.bodies("/api/generate")[-1]["prompt"]
    assert "EARLIER: The user and the assistant went through part of the work." in prompt
    assert "USER: message 0" not in prompt and "USER: message 4" in prompt


def test_the_extractive_entry_quotes_the_start_and_end(job_parts):
    cfg, writer, _, _ = job_parts
    add_turn(writer, cfg, "ana", "s1", "We start with the DNS records. Then more.")
    add_turn(writer, cfg, "ana", "s1", "Finally we renew the certificate.")
    assert write_diary(writer, None, cfg, "ana", "s1", extractive=True) == "written"
    entry, extractive = query(cfg, "SELECT entry, is_extractive FROM diary")[0]
    assert extractive == 1
    assert "user: We start with the DNS records." in entry
    assert "user: Finally we renew the certificate." in entry


def test_an_unknown_session_writes_nothing(job_parts):
    cfg, writer, model, _ = job_parts
    assert write_diary(writer, model, cfg, "ana", "nope") == "up-to-date"
    assert query(cfg, "SELECT count(*) FROM diary") == [(0,)]
