"""The turn wing: one message in, the context assembled, the reply out.

    chat.py         ChatService: store the message, build the context, stream the reply
    context.py      the messages a model receives for one turn, always within budget
    carried.py      what the request's messages already say, which recall does not repeat
    quotes.py       past messages as a prompt quotes them: whole, or the sentences that answer
    corrected.py    the prompt as the person's corrections leave it, and which stretches they end
    agent.py        Hilo's own agent: a turn in which the model may call tools
    tools/          the tools that agent may call, and their registry
    macros.py       tool chains learned from what the agent did
    metrics.py      what this process measures for /metrics
    records.py      turn records: what each model call of a turn was sent, for the turn
                    inspector; the recall counts folded from them
"""
