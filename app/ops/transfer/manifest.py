"""The record of what a markdown export wrote, kept in the export folder.

`.hilo-export.json` lists each file Hilo wrote (its path in the folder) with the SHA-256
of its content. It is what lets an export update a folder that also holds a person's own
notes (an Obsidian vault): a file is Hilo's to replace or remove only if it is listed and
unchanged since Hilo wrote it. A missing or unreadable manifest lists nothing, so
nothing already in the folder is touched without --overwrite.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from app.ops.transfer.files import read_own_file, write_file

__all__ = ["MANIFEST_FILE", "MANIFEST_FORMAT", "MANIFEST_VERSION", "content_hash", "ExportManifest"]

MANIFEST_FILE = ".hilo-export.json"
MANIFEST_FORMAT = "hilo-export-manifest"
MANIFEST_VERSION = 1


def content_hash(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


@dataclass(frozen=True)
class ExportManifest:
    user_id: str | None = None
    files: dict[str, str] = field(default_factory=dict)  # relative path → content hash

    @classmethod
    def read(cls, folder: Path) -> ExportManifest:
        content = read_own_file(folder / MANIFEST_FILE)
        try:
            data = json.loads(content) if content is not None else None
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT \
                or not isinstance(data.get("files"), dict):
            return cls()
        files = {path: digest for path, digest in data["files"].items()
                 if isinstance(path, str) and isinstance(digest, str)}
        user_id = data.get("user_id") if isinstance(data.get("user_id"), str) else None
        return cls(user_id, files)

    def write(self, folder: Path) -> None:
        document = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION,
                    "user_id": self.user_id, "files": dict(sorted(self.files.items()))}
        write_file(folder / MANIFEST_FILE,
                   (json.dumps(document, ensure_ascii=False, indent=1) + "\n").encode("utf-8"))

    def wrote_unchanged(self, relative: str, current: bytes | None) -> bool:
        """Whether Hilo wrote this file and nobody has changed it since."""
        return current is not None and self.files.get(relative) == content_hash(current)
