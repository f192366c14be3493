"""The operations wing: looking after a data directory.

    backup.py       backup, restore and rebuild of the memory database
    doctor.py       `hilo doctor`: is this installation healthy, and what to do if not
    turn_view.py    the turn inspector's data: a stored turn as the memory is now, and
                    the jobs it set off (rendered by the JSON route and the page)
    transfer/       export and import of one user's memory
    demo/           a scripted model to try Hilo without a model server
"""
