"""The browser tests' fixtures (tests/ui/browser.py): the fake model, `hilo serve`, and
Debian's chromium driven by Playwright."""

from tests.ui.browser import chromium, fake_model, page, serve

__all__ = ["chromium", "fake_model", "page", "serve"]
