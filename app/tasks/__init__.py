"""The tasks wing: prompts Hilo sends itself on a schedule.

    schedule.py      a cron expression, an ISO date-time or plain words → a validated schedule
    grammar.py       plain English and Spanish read into a moment or cron fields, or refused
    phrases.py       the words the grammar reads, per language, and the examples it offers
    store.py         the tasks as the database keeps them: records, reads, edits, imports
    sessions.py      a task's runs' session (task:<id>)
    runs.py          their runs: asking for one, claiming a due one, finishing it, the log
    delivery.py      telling the person what a run found: reports, delivered and notified marks
    config_tasks.py  the [[scheduled_tasks]] of config.toml, synced at every worker start
"""
