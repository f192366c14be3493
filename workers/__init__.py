"""The background workers: a Huey queue and one module per job.

    queue.py        the Huey instance (queue.sqlite3 or Redis), configure(), locks, failures
    storage.py      Huey's SQLite storage on APSW (WAL, synchronous=NORMAL)
    huey_loader.py  Huey without the Redis client, for a process whose queue is SQLite
    jobs.py         the jobs as the queue knows them: names, arguments, policy (light)
    runner.py       JobRunner: the worker's resources and each job's body (retry, locks)
    consumer.py     the consumer's start: `hilo worker` (thread workers only), huey_consumer
    handoff.py      QueueHandoff: the chat's hand-off (app.turn.chat.Handoff) onto the queue
    retry.py        the retry policy: backoff with jitter, then degrade, visibly
    distill.py      a turn → profile attributes and dated facts   (fallback: capture.py)
    compact.py      old events → context cards                     (fallback: extractive.py)
    diary.py        an ended session → a diary entry               (fallback: extractive.py)
    consolidate.py  merge duplicates, fold old cards, decay importance
    embed.py        vectors for events, facts and cards, and the re-embed backfill
    reconcile.py    the reconcile sweep: what the database says is undone
    metrics.py      the queue's part of /metrics: depth, failures, the jobs workers ran
    model_output.py asking the model for JSON and judging the answer
    reading.py      read-only connections for jobs
"""
