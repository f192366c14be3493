"""The operations wing: looking after a data directory.

    backup.py       backup, restore and rebuild of the memory database
    doctor.py       `hilo doctor`: is this installation healthy, and what to do if not
    transfer/       export and import of one user's memory
    demo/           a scripted model to try Hilo without a model server
"""
