"""Fixtures shared by the reliability tests come from tests/conftest.py."""
