"""The background workers: a Huey queue and one module per job.

    queue.py        the Huey instance (queue.sqlite3 or Redis), configure(), job context
    storage.py      Huey's SQLite storage on APSW (WAL, synchronous=NORMAL)
    consumer.py     `hilo worker`: the consumer, thread workers only
    handoff.py      what the front-end calls: after_reply(), session_ended()
    tasks.py        thin Huey wrappers: queueing, retry with backoff, locks, periodic runs
    retry.py        the retry policy: backoff with jitter, then degrade, visibly
    distill.py      a turn → profile attributes and dated facts   (fallback: capture.py)
    compact.py      old events → context cards                     (fallback: extractive.py)
    diary.py        an ended session → a diary entry               (fallback: extractive.py)
    consolidate.py  merge duplicates, fold old cards, decay importance
    embed.py        vectors for events, facts and cards, and the re-embed backfill
    reconcile.py    what the database says is undone, to enqueue again
    model_output.py asking the model for JSON and judging the answer
    reading.py      read-only connections for jobs
"""
