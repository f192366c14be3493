"""Hilo: persistent, layered memory for chat agents on local models."""

from importlib.metadata import PackageNotFoundError, version

try:
    # The one place the version is written is pyproject.toml; this reads it as installed.
    __version__ = version("hilo")
except PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"
