"""Rendering the audit pages: the autoescaped templates, the security headers, errors as pages, and
how a page's operation is declared (`page_operation`)."""

from __future__ import annotations

import base64
import hashlib
import logging
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import quote

import jinja2
from markupsafe import Markup
from starlette.responses import HTMLResponse, RedirectResponse, Response

from audit.chain import utc_instant
from core.actor import Actor
from core.errors import GatewayError
from gateway.http.audit_pages.session import SESSION_COOKIE, SignedOut
from gateway.http.operation import Operation, Schema, page_answers, read_heading
from gateway.http.traced import Call, serving

log = logging.getLogger("gateway.http")

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "audit"
ENVIRONMENT = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def trace_href(trace_id: str) -> str:
    """The page of one trace."""
    return "/audit/traces/" + quote(trace_id, safe="")


# The pages write an answer's instants as the trail does (ISO 8601 in UTC, to the microsecond), and
# link each trace it names to its page.
ENVIRONMENT.filters.update(instant=utc_instant, trace_href=trace_href)
STYLE = (TEMPLATES / "page.css").read_text()
# No script runs on these pages; the one inline style block is allowed by its hash.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'sha256-"
        + base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
        + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # not no-referrer: that makes browsers send `Origin: null` on POST
    "cache-control": "no-store",
}


def page(status: int, template: str, actor: Actor | None, **values: Any) -> tuple[int, Response]:
    body = ENVIRONMENT.get_template(template).render(style=Markup(STYLE), signed_in=actor, **values)
    return status, HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def sign_in_form(status: int, message: str | None = None) -> tuple[int, Response]:
    return page(status, "sign_in.html", None, message=message)


def redirect_home() -> RedirectResponse:
    return RedirectResponse("/audit", status_code=303, headers={"cache-control": "no-store"})


def forget_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/audit", httponly=True, samesite="strict")


PageHandler = Callable[[Call], Awaitable[tuple[int, Response]]]


def as_page(handler: PageHandler) -> Callable[[Call], Awaitable[tuple[int, Response]]]:
    """Errors become pages, not JSON: a dead session shows the sign-in form (and drops the cookie),
    any other gateway error a page that says what went wrong. The trace keeps the error code."""

    async def run(call: Call) -> tuple[int, Response]:
        try:
            return await handler(call)
        except SignedOut as exc:
            call.trace.error_code = exc.code
            status, response = sign_in_form(exc.status, exc.message)
            forget_session(response)
            return status, response
        except GatewayError as exc:
            call.trace.error_code = exc.code
            if exc.status >= 500:
                call.trace.failed(unless=("deny", "write"))
                log.warning("%s %s: %s", call.trace.endpoint, exc.code, exc.message)
            return page(exc.status, "message.html", None, title=f"Error {exc.status}", message=exc.message)

    return run


NOT_SIGNED_IN = "Not signed in: the sign-in form"


def page_operation(
    heading: str,
    endpoint: str,
    handler: PageHandler,
    answer: Schema,
    errors: dict[int, str],
    *,
    status: int = 200,
    auth: str | None = "session",
    parameters: tuple[Schema, ...] = (),
    body: Schema | None = None,
    description: str = "",
) -> Operation:
    """An audit page's operation (gateway/http/operation.py): its heading (`"GET /audit/verify: The
    chain check as a page"`), `handler` served `as_page` under `endpoint` (the name its audit rows
    carry), its `answer` (a 200 unless `status` says otherwise) and `errors` pages; the session's,
    unless `auth` says otherwise."""
    path, method, summary = read_heading(heading)
    return Operation(
        path,
        method,
        serving(endpoint, as_page(handler)),
        summary,
        "audit pages",
        page_answers({str(status): answer}, errors),
        auth=auth,
        body=body,
        parameters=parameters,
        description=description,
    )
