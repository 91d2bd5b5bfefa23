"""Who calls, and the sign-in's settings, as dependencies of the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from conversation_service.auth.guard import Authentication
from conversation_service.settings.auth import ChatOIDCSettings
from shared.app_state import started

AuthDep = Annotated[Authentication, Depends(started("auth"))]
OIDCSettingsDep = Annotated[ChatOIDCSettings, Depends(started("settings", "oidc"))]
