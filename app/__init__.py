"""Hilo: persistent, layered memory for chat agents on local models."""

# The one place the version is written; pyproject.toml reads it from here. A literal,
# not importlib.metadata: reading the installed metadata costs every `hilo` ~30 ms.
__version__ = "0.1.0"
