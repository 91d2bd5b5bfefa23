"""One OpenID Provider per test module: starting Node.js for each test would cost more than the test."""

from __future__ import annotations

import pytest

from tests.support.oidc_provider import running_provider


@pytest.fixture(scope="module")
async def provider(tmp_path_factory):
    async with running_provider(tmp_path_factory.mktemp("op")) as provider:
        yield provider
