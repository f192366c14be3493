"""The recall wing: which stored memory is relevant to what the user just said.

    query.py        reading the question: Query, make_query, focus_question
    bm25.py         the full-text stream: FTS5 BM25 at a bounded cost, cached word counts
    streams.py      the other streams: vectors, importance, recency, session, labels
    learned.py      the messages that the matching facts and cards were learned from
    fusion.py       weighted RRF over the streams: search, search_memory (what matches, and why)
    sentences.py    sentences, and which of the searched words each holds
    owners.py       what a search may return: the user's own, current owners
    state.py        Recall: the process's vector index, word counts and embedding threads
    event_labels.py who said an event and when, indexed beside its text
    speakers.py     the names a question may call the two speakers by
    vectors.py      stored embeddings and the in-memory per-user vector index
    ann.py          the approximate nearest-neighbour graph for a large block of vectors
"""
