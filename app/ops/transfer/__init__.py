"""Export and import of one user's memory.

Two export formats. `export_markdown` writes a folder a person can read, grep, keep in
git or open in Obsidian; `export_jsonl` writes one JSON object per line with a "type"
(session, event, card, profile, fact, diary, task, memory_md) — for machines and for
moving a memory between databases. Both carry everything a user owns: the events (the
source of truth), cards, profile and fact history with their tombstones (a forgotten
fact's hash, so it is not learned again), diary, tasks with their zones, and MEMORY.md;
export → import → export gives the same records, but for trust, which no import brings.
`import_path` reads either back; `import_kinder_agent` reads the memory database of the
Bash REPL Hilo grew out of. Dates are kept. Embeddings are not exported: the worker
recomputes them.

    records.py       the record vocabulary: reports, Problem, TransferError, field normalisers
    user_records.py  one user's memory read as records, from a snapshot
    markdown.py      the markdown folder: export and reader
    marked.py        its entries read back exactly: messages and fact versions
    memory_md.py     MEMORY.md: carried, kept beside the owner's until they accept it
    frontmatter.py   the YAML front matter of its files (no aliases, capped)
    manifest.py      .hilo-export.json: which files of a folder Hilo wrote
    jsonl.py         JSON lines: export and reader
    kinder_agent.py  the kinder-agent database reader
    importer.py      stores any reader's records, idempotently; import_path
    files.py         exports through fresh temporary files; imports read no links

Nothing an import reads can stop it: a record or file that cannot be stored is skipped
and listed in the report with the reason (`ImportReport.summary()`).
"""

from app.ops.transfer.importer import import_path
from app.ops.transfer.jsonl import export_jsonl
from app.ops.transfer.kinder_agent import import_kinder_agent
from app.ops.transfer.markdown import export_markdown
from app.ops.transfer.records import ExportReport, ImportReport, Problem, TransferError

__all__ = [
    "ExportReport", "ImportReport", "Problem", "TransferError",
    "export_jsonl", "export_markdown", "import_kinder_agent", "import_path",
]
