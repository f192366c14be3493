"""The model wing: everything that talks to a model server or speaks its formats.

    client.py       ModelClient: chat, JSON, embeddings and relays against one model server
    errors.py       ModelError and its family: what failed, where, what to do, retry or not
    stream.py       a chat reply, whole (ChatReply) or as it streams (ChatStream)
    usage.py        what a call cost the engine (EngineTime, JsonCall), a learning call's budget
    transport.py    HTTP to one server: failures become ModelErrors, model work is reported
    apis.py         Ollama's native API and the OpenAI-compatible one, as Hilo's calls speak them
    relay.py        a client's chat request relayed in its own API, its reply read on the side
    messages.py     Ollama's and OpenAI's messages: text, images, roles
    tool_calls.py   tool calls in one stored shape, rendered per API; events back as messages
    client_chat.py  a client's own chat request (ClientChat), relayed with only its messages changed
    replies.py      a reply gathered from its stream (ReplyRecord) and the chat that got it (SentChat)
    translate.py    an Ollama chat request and its reply, for a server that speaks only OpenAI's
    embedders.py    the models that turn text into vectors
    token_count.py  token estimates, calibrated from what the server reports
    prompt_speed.py how fast the server reads a prompt, from its counters on every reply
    probe.py        are the models a configuration names there?
    json_modes.py   how a server takes a request for JSON: a ladder, learned once per server and model
    minilm.py       all-MiniLM-L6-v2 on ONNX Runtime: the `local` embedder's model
"""
