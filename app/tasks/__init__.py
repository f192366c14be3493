"""The tasks wing: prompts Hilo sends itself on a schedule.

    schedule.py      a cron expression or plain English or Spanish → a validated schedule
    store.py         the tasks as the database keeps them: records, reads, edits, imports
    sessions.py      a task's runs' session (task:<id>)
    runs.py          their runs: asking for one, claiming a due one, finishing it, the log
    delivery.py      telling the person what a run found: reports, delivered and notified marks
    config_tasks.py  the [[scheduled_tasks]] of config.toml, synced at every worker start
"""
