"""The queue runtime: when and how the learning in app/learn/ runs, never what it learns.

    queue.py         the Huey instance (queue.sqlite3 or Redis), configure(), failures
    storage.py       Huey's SQLite storage on APSW (WAL, synchronous=NORMAL)
    huey_loader.py   Huey without the Redis client, for a process whose queue is SQLite
    hooks.py         what HiloHuey adds on enqueue and dequeue
    locks.py         who holds a queue lock, and whether that holder is still alive
    jobs.py          the jobs as the queue knows them: names, arguments, policy (light)
    runner.py        JobRunner: the worker's resources and each job's body
    retry.py         the retry policy: backoff with jitter, then degrade, visibly
    chat_activity.py the user first: learning gives way while a person waits on the model
    consumer.py      the consumer's start: `hilo worker` (thread workers only), huey_consumer
    handoff.py       QueueHandoff: the chat's hand-off (app.turn.chat.Handoff) onto the queue
    waiting.py       one learning job and one diary job per session wait, no more
    reconcile.py     the reconcile sweep: what the database says is undone
    scheduler.py     the every-minute tick: due scheduled tasks run as agent turns
    notify.py        telling the person a task ran: webhook and desktop notification
    inspection.py    the queue as an operator sees it (`hilo queue`)
    queue_metrics.py the queue's part of /metrics: depth, failures, the jobs workers ran
    cpu.py           the worker's share of the CPU, set before anything heavy runs
"""
