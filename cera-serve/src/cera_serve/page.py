"""The chat page at ``/``: one HTML file with its script and styles inline, nothing fetched
from elsewhere (`chat_page.html`). It talks to this server's own API: ``GET /v1/models``
for the model choice, ``POST /v1/chat/completions`` streamed for the replies (Stop aborts
the request, which cancels the generation), with the system prompt and sampling settings
the user sets; an API key typed into it goes in each request's ``Authorization`` header.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

# the page may run its own inline script and styles and call this server, and nothing else
POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
          "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")  # fmt: skip


def route():
    html = resources.files(__package__).joinpath("chat_page.html").read_text(encoding="utf-8")

    async def page(request: Request) -> Response:
        return HTMLResponse(html, headers={"Content-Security-Policy": POLICY, "Cache-Control": "no-cache",
                                           "X-Content-Type-Options": "nosniff"})  # fmt: skip

    return page
