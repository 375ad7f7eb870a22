"""LiteLLM proxy's `custom_auth` hook for the gateway tests: two caller keys, each its
own user and team, read from the environment; any other key, or none, is refused
(401). No database: the proxy keeps nothing of its callers but this."""

import os

from fastapi import Request
from litellm.proxy._types import ProxyException, UserAPIKeyAuth

CALLERS = {
    os.environ["TENANTCHECK_GATEWAY_KEY_A"]: "a",
    os.environ["TENANTCHECK_GATEWAY_KEY_B"]: "b",
}


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    caller = CALLERS.get(api_key)
    if caller is None:
        raise ProxyException(message="unknown key", type="auth_error", param="api_key", code=401)
    return UserAPIKeyAuth(api_key=api_key, user_id=f"tenant-{caller}", team_id=f"team-{caller}")
