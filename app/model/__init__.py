"""The model wing: everything that talks to a model server or speaks its formats.

    llm.py          the client: errors, stream records, transport, relays, ModelClient
    formats.py      Ollama's and OpenAI's message formats, and translating between them
    embedders.py    the models that turn text into vectors
    token_count.py  token estimates, calibrated from what the server reports
    probe.py        are the models a configuration names there?
"""
