"""Hilo's demo model: try Hilo on a machine with no model server (`make try`,
`hilo demo-model`).

    mind.py     what it says: plain answers from what it was told, and the JSON the
                workers ask for (facts, summaries, diary entries) from the user's lines
    server.py   Ollama's HTTP API (and /v1) on loopback, where [llm] url points
"""
