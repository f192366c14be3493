"""/docs (Swagger UI) and /redoc (ReDoc), served with their assets from the package, as
FastAPI's self-hosting recipe does: offline, Hilo's home, a CDN is out of reach and the
pages would stay white. The assets are the ones fastapi-offline ships. A content security
policy keeps the pages on this server: ReDoc's own logo, which it links from its CDN, is
not fetched."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_URL", "ASSETS_DIR", "POLICY", "install_docs"]

ASSETS_URL = "/docs-assets"
ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"
# Inline styles and the page's own start-up script are FastAPI's; ReDoc runs in a blob worker.
POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
          "'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; font-src 'self' data:")


def _kept_here(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = POLICY
    return page


def install_docs(app: FastAPI) -> None:
    """Serve /docs and /redoc on `app`, which was made with docs_url=redoc_url=None."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    title, openapi = app.title, app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return _kept_here(get_swagger_ui_html(
            openapi_url=openapi, title=f"{title} - Swagger UI",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png"))

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return _kept_here(get_redoc_html(
            openapi_url=openapi, title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png", with_google_fonts=False))
