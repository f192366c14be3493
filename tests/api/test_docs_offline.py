"""/docs and /redoc work offline: every script, stylesheet and icon they load is served by
Hilo itself, from the package (a CDN is out of reach where Hilo usually runs)."""

from __future__ import annotations

import re

import pytest


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_docs_load_only_what_hilo_serves(hilo, page):
    client = hilo.client()
    html = client.get(page).text
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert assets, html
    for asset in assets:
        assert asset.startswith("/"), f"{page} loads {asset} from elsewhere"
        response = client.get(asset)
        assert response.status_code == 200 and response.content, asset
