"""Hilo: persistent, layered memory for chat agents on local models.

The folders are the layers; each imports only those below it (tests/test_layers.py):

    api/ cli/ mcp/  the front-ends: HTTP, the `hilo` command and its REPL, MCP
    ops/            backup, doctor, export and import
    (workers/)      the queue runtime, beside app/: when the learning runs
    learn/          what the workers learn from a conversation
    turn/           one turn: the chat service, context assembly, the agent and its tools
    recall/         which memory is relevant to what was just said
    model/          talking to model servers: client, relay, formats, embedders, tokens
    tasks/          scheduled tasks: the schedule parser, the store, runs and delivery
    memory/         the compiled memory layers and their one write path
    *.py            the store: config, datadir, db, writer, events, sanitize, fts, access,
                    log, timeutil, errors (the HiloError family)
"""

# The one place the version is written; pyproject.toml reads it from here. A literal,
# not importlib.metadata: reading the installed metadata costs every `hilo` ~30 ms.
__version__ = "0.1.0"
