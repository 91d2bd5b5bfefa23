"""Both services' API docs page, ``/docs`` (Swagger UI), that works offline.

FastAPI's own page loads Swagger UI and a favicon from CDNs, so on a machine without internet it
stays blank. Here the same page loads those files from this service: they are shipped in the
pinned ``fastapi-offline`` wheel (Swagger UI 5, MIT), whose ``static`` folder is served under
``/docs/assets``; nothing on the page comes from another host. ReDoc is not served: its bundle
fetches its logo from its vendor's CDN whatever the page says. The app is created with
``docs_url=None, redoc_url=None`` and then handed to ``install_api_docs``.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
ASSETS_URL = "/docs/assets"
DOCS_URL = "/docs"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"


def install_api_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and its assets from this process."""
    if not (ASSETS_DIR / "swagger-ui-bundle.js").is_file():
        raise RuntimeError(f"Swagger UI's files are missing from {ASSETS_DIR}: reinstall fastapi-offline")
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="api-docs-assets")

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        # Behind a proxy that strips a path prefix (root_path), the page still finds its files.
        root = request.scope.get("root_path", "")
        assets = f"{root}{ASSETS_URL}"
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}", swagger_js_url=f"{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui.css", swagger_favicon_url=f"{assets}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    @app.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
