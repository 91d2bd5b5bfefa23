"""The page's sign-in: ``/auth/login`` sends the browser to the identity provider, ``/auth/callback``
comes back from it with a session cookie, ``/auth/session`` tells the page who is signed in (and its
CSRF token), ``/auth/logout`` ends the session here and at the provider when it supports it.

A sign-in that fails goes back to the page with ``?signin_error=<code>``, never to an error page of
ours: the page says what happened and offers to try again.
"""

from __future__ import annotations

import logging
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from conversation_service.auth.deps import AuthDep, OIDCSettingsDep
from conversation_service.auth.login import SignInFailed
from conversation_service.auth.schemas import SessionInfo, SessionUser, SignedOut
from conversation_service.auth.sessions import CSRF_HEADER, WebSessions
from conversation_service.errors import Forbidden, NotFound
from conversation_service.settings.auth import ChatOIDCSettings
from shared.oidc.errors import ProviderUnavailable

log = logging.getLogger(__name__)
router = APIRouter(prefix="/auth", tags=["sign-in"])
NO_STORE = {"Cache-Control": "no-store"}


def _redirect_uri(request: Request, oidc: ChatOIDCSettings) -> str:
    return oidc.redirect_uri or str(request.url_for("auth_callback"))


def _signin_error(code: str) -> RedirectResponse:
    return RedirectResponse(f"/?signin_error={code}", status_code=303, headers=NO_STORE)


def _set_cookie(response: Response, sessions: WebSessions, name: str, value: str, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, path="/", secure=sessions.settings.cookie_secure,
                        httponly=True, samesite="lax")


def _clear_cookie(response: Response, sessions: WebSessions, name: str) -> None:
    response.delete_cookie(name, path="/", secure=sessions.settings.cookie_secure, httponly=True, samesite="lax")


@router.get("/session", response_model=SessionInfo)
async def session_info(request: Request, response: Response, auth: AuthDep) -> SessionInfo:
    response.headers.update(NO_STORE)
    info = SessionInfo(mode=auth.mode, login=auth.login is not None)  # type: ignore[arg-type]
    secret = auth.session_secret(request)
    if secret is None or auth.sessions is None:
        return info
    user = await auth.sessions.user(secret)
    if user is None:
        return info
    return info.model_copy(update={
        "signed_in": True, "user": SessionUser(id=user.user_id, org=user.org_id, name=user.name or user.user_id),
        "csrf_token": auth.sessions.csrf_token(secret), "expires_at": user.expires_at,
    })


@router.get("/login", include_in_schema=False)
async def login(request: Request, auth: AuthDep, oidc: OIDCSettingsDep,
                return_to: Annotated[str | None, Query(max_length=2000)] = None) -> Response:
    if auth.login is None or auth.sessions is None:
        raise NotFound("this service has no sign-in page: AUTH_OIDC_CLIENT_ID is not set")
    try:
        url, pending = await auth.login.begin(return_to, _redirect_uri(request, oidc))
    except ProviderUnavailable as exc:
        log.warning("sign-in could not start", extra={"reason": str(exc)})
        return _signin_error("unavailable")
    response = RedirectResponse(url, status_code=302, headers=NO_STORE)
    _set_cookie(response, auth.sessions, auth.sessions.login_cookie_name, pending,
                auth.sessions.settings.login_timeout_s)
    return response


@router.get("/callback", name="auth_callback", include_in_schema=False)
async def callback(request: Request, auth: AuthDep) -> Response:
    if auth.login is None or auth.sessions is None:
        raise NotFound("this service has no sign-in page: AUTH_OIDC_CLIENT_ID is not set")
    sessions = auth.sessions
    params = {key: value for key, value in request.query_params.items() if len(value) <= 4096}
    try:
        signed_in, return_to = await auth.login.finish(params, request.cookies.get(sessions.login_cookie_name))
    except SignInFailed as failed:
        log.info("a sign-in failed", extra={"reason": failed.code})
        response = _signin_error(failed.code)
    else:
        secret = await sessions.create(signed_in)
        response = RedirectResponse(return_to, status_code=303, headers=NO_STORE)
        _set_cookie(response, sessions, sessions.cookie_name, secret, sessions.settings.max_age_s)
    _clear_cookie(response, sessions, sessions.login_cookie_name)
    return response


@router.post("/logout", response_model=SignedOut)
async def logout(request: Request, response: Response, auth: AuthDep, oidc: OIDCSettingsDep) -> SignedOut:
    """Ends the page's session (needs its X-CSRF-Token); the answer says where the browser signs
    out at the provider too."""
    response.headers.update(NO_STORE)
    secret = auth.session_secret(request)
    if secret is None or auth.sessions is None or auth.login is None:
        return SignedOut(redirect="/")
    if not auth.sessions.csrf_valid(secret, request.headers.get(CSRF_HEADER)):
        raise Forbidden(f"missing or wrong {CSRF_HEADER}: reload the page")
    tokens = await auth.sessions.end(secret) or {}
    _clear_cookie(response, auth.sessions, auth.sessions.cookie_name)
    if tokens.get("refresh_token"):
        await auth.login.revoke(tokens["refresh_token"])
    page = urlsplit(_redirect_uri(request, oidc))
    url = await auth.login.end_session_url(tokens.get("id_token"), f"{page.scheme}://{page.netloc}/")
    return SignedOut(redirect=url or "/")
