"""The security headers on every response of the console, error pages and static files included.

- ``Content-Security-Policy``: scripts, styles, images, fetches and form targets from the console's own
  origin only; no inline script or style (the templates have none: behaviour is in ``static/console.js``,
  looks in ``static/console.css``), no plugins, no ``<base>``; ``frame-ancestors 'none'``.
- ``X-Frame-Options: DENY`` for browsers older than ``frame-ancestors``: the console is never framed,
  so no other site can lay it under a decoy (clickjacking).
- ``X-Content-Type-Options: nosniff``: a response is what its type says.
- ``Referrer-Policy: same-origin``: links out of the console do not carry its URLs (they hold ids and
  filters) to other sites.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "SecurityHeaders"]

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ]
)

SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware that sets :data:`SECURITY_HEADERS` on every HTTP response of ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
