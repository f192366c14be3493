"""Screenshots of the memory page's main views for docs/memory-page.md, taken by a real browser
on a real `hilo serve` with a small made-up memory. Not run by the test suite:

    python -m tests.ui.screenshots [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import httpx

from tests.conftest import REPO_ROOT
from tests.fake_ollama import CpuSpeed, FakeOllama
from tests.ui.browser import CHROMIUM, ServeProcess, playwright_api

WIDTH, HEIGHT = 1100, 900


def _memory(url: str) -> int:
    """A few facts, one corrected, and two turns; returns the last turn's id."""
    httpx.post(f"{url}/memory/facts", json={"category": "preference", "key": "editor",
                                            "value": "Ana writes in Helix"})
    httpx.post(f"{url}/memory/facts", json={"category": "preference", "key": "editor",
                                            "value": "Ana moved to Neovim in March"})
    httpx.post(f"{url}/memory/facts", json={"category": "decision", "key": "database",
                                            "value": "Postgres 16 for the billing service"})
    httpx.put(f"{url}/memory/profile/name", json={"value": "Ana"})
    for text in ("Which editor do I use these days?", "And which database did we pick?"):
        httpx.post(f"{url}/api/chat", headers={"X-Hilo-Session": "demo"}, timeout=30,
                   json={"model": "gemma3:4b", "stream": False,
                         "messages": [{"role": "user", "content": text}]})
    return httpx.get(f"{url}/memory/turns").json()["turns"][0]["id"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "screenshots")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    fake = FakeOllama(cpu=CpuSpeed(1e9, 1e9)).start()  # a server that reports its cache
    fake.script_chat("You use Neovim (since March).", "Postgres 16, for billing.")
    with tempfile.TemporaryDirectory() as data:
        server = ServeProcess(Path(data), fake).start()
        try:
            turn = _memory(server.url)
            fact = httpx.get(f"{server.url}/memory/facts").json()["facts"]
            editor = next(f["id"] for f in fact if f["key"] == "editor")
            views = {"overview": "/ui", "fact-history": f"/ui/facts/{editor}",
                     "turn-inspector": f"/ui/turns/{turn}", "queue": "/ui/queue"}
            with playwright_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
                tab = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
                for name, path in views.items():
                    tab.goto(server.url + path)
                    tab.screenshot(path=out / f"{name}.png", full_page=True)
                    print(out / f"{name}.png")
                browser.close()
        finally:
            server.stop()
            fake.stop()


if __name__ == "__main__":
    main()
