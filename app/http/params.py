"""Path and query parameters more than one front-end's routes take, bounded where they
are declared: an id past SQLite's rowid range is a 422, not an overflow in a query."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

__all__ = ["MAX_ROW_ID", "TurnId"]

MAX_ROW_ID = 2**63 - 1
TurnId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="a turn record's id")]
