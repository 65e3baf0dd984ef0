"""API keys: `Authorization: Bearer <key>` -> the namespace whose plans the caller may see.

Without keys configured the service is open (bound to loopback by default) and every caller
shares one namespace. With keys, every endpoint but /healthz and /readyz needs one, and each key
sees only the plans it submitted (a key's namespace is its `NAMESPACE:` prefix in the keys file,
or a hash of the key).
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.errors import ApiProblem
from service.settings import Settings

bearer = HTTPBearer(auto_error=False, description="an API key of this service")


def namespace_for(
    settings: Settings, credentials: HTTPAuthorizationCredentials | None
) -> str | None:
    """The caller's namespace; None when the service has no keys (everything visible)."""
    if not settings.auth_enabled:
        return None
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiProblem(401, "unauthorized",
                         "this service needs an API key: send 'Authorization: Bearer <key>'",
                         headers={"WWW-Authenticate": "Bearer"})
    offered = credentials.credentials.encode()
    found = None
    for key, namespace in settings.api_keys.items():  # compare with every key: constant time
        if hmac.compare_digest(offered, key.encode()):
            found = namespace
    if found is None:
        raise ApiProblem(401, "unauthorized", "unknown API key; check the key you send",
                         headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    return found


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def require_namespace(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str | None:
    """FastAPI dependency: authenticate the caller and return its namespace (in the event loop:
    a comparison per key is cheaper than a hop to the thread pool)."""
    return namespace_for(settings, credentials)


NamespaceDep = Annotated[str | None, Depends(require_namespace)]
