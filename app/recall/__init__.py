"""The recall wing: which stored memory is relevant to what the user just said.

    retrieval.py    the question read, the streams (BM25, vectors, session, labels), fusion
    event_labels.py who said an event and when, indexed beside its text
    vectors.py      stored embeddings and the in-memory per-user vector index
    ann.py          the approximate nearest-neighbour graph for a large block of vectors
"""
