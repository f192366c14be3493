"""learn_macros: the tool chains in the stored tool events become macros (app/turn/macros.py).

A plain function of (writer, config), run every ten minutes by the Huey periodic task
(workers/jobs.py) and by `hilo macros learn`. Learning is recomputed from the events
each time, inside one transaction per user, so a run that is repeated, or lost with a
killed worker and redone, leaves the same table.
"""

from __future__ import annotations

from app.config import Config
from app.learn.reading import reading
from app.log import get_logger
from app.turn.macros import LearnCounts, learn_macros, users_with_tool_events
from app.writer import Writer

__all__ = ["log", "learn_all_macros"]

log = get_logger(__name__)


def learn_all_macros(writer: Writer, config: Config,
                     user_id: str | None = None) -> dict[str, LearnCounts]:
    """Learn every user's macros (or one user's); what changed, by user."""
    if user_id is None:
        with reading(writer) as con:
            users = users_with_tool_events(con)
    else:
        users = [user_id]
    min_support = config.tools.macro_min_support
    counts = {}
    for user in users:
        counts[user] = writer.submit(
            lambda con, user=user: learn_macros(con, user, min_support=min_support))
        if counts[user] != LearnCounts():
            log.info("macros.learned", user_id=user, **counts[user].to_json())
    return counts
