"""The tasks wing: prompts Hilo sends itself on a schedule.

    schedule.py     a cron expression or plain English or Spanish → a validated schedule
    store.py        the tasks, their runs and deliveries as the database keeps them
"""
