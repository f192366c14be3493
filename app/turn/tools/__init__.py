"""The tools of Hilo's own agent (app/turn/agent.py runs the loop that calls them).

    registry.py   Tool, Registry, ToolContext: descriptions for the model, calls checked
                  and run, every failure a result the model reads
    memory.py     remember, recall (with explain), forget, profile
    tasks.py      add_task, list_tasks, pause_task, remove_task
    terminal.py   terminal: allow rules stored, approvals, no shell, timeout, output cap
    terminal_rules.py   what an allow rule covers, and the options no rule covers
    terminal_sandbox.py bubblewrap around each command, a clean environment
    web.py        web_fetch: allowed hosts only, one deadline, decompressed size bounded
"""

from __future__ import annotations

from app.config import Config
from app.turn.tools import memory, tasks, terminal, web
from app.turn.tools.registry import (
    ERROR_PREFIX,
    SURFACES,
    Approver,
    Decision,
    Registry,
    Surface,
    Tool,
    ToolContext,
    ToolFailed,
    ToolResult,
)


def default_registry(config: Config) -> Registry:
    """The tools `config` turns on: memory and tasks always; the terminal unless
    [tools] terminal = false; web_fetch when [tools] web_allowed_hosts lists a host."""
    tools = [*memory.TOOLS, *tasks.TOOLS]
    if config.tools.terminal:
        tools.append(terminal.TOOL)
    if config.tools.web_allowed_hosts:
        tools.append(web.TOOL)
    return Registry(tools)


__all__ = ["ERROR_PREFIX", "SURFACES", "Approver", "Decision", "Registry", "Surface", "Tool",
           "ToolContext", "ToolFailed", "ToolResult", "default_registry"]
