"""`python -m app.cli` is `hilo`."""

from app.cli import run_and_exit

run_and_exit()
