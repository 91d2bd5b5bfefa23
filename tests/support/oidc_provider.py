"""A real OpenID Provider for the tests: ``oidc-provider`` (OpenID Certified) run by Node.js on loopback.

Its packages come from the committed lock file in ``tests/oidc_provider`` (``npm ci``, which ``.ci/run``
runs; here it is run on first use when the folder has none). With ``CI=true`` a provider that cannot
be installed or started fails the test; elsewhere the test is skipped.

The provider signs with keys the test makes (``make_keys``: one RSA and one EC P-256 key), so a test
can also sign tokens of its own with the provider's keys (``sign``) to set a claim exactly (an ``iss``
of another issuer, an ``exp`` just past the leeway). Its users sign in on its own page
(``/interaction/...``); ``authorization_code`` goes through that page the way a browser would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.support.databases import services_required
from tests.support.servers import REPO_ROOT, free_port

PROVIDER_DIR = REPO_ROOT / "tests" / "oidc_provider"
MIN_NODE = (20, 19)
CHAT_RESOURCE = "https://chat.taskforce.test"
AGENT_RESOURCE = "https://agent.taskforce.test"
CHAT_AUDIENCE = "taskforce-chat"
AGENT_AUDIENCE = "taskforce-agent"
# The claims this provider puts its users' organisation and permissions in (not the defaults: the
# services are configured with these names, as they would be for a real identity provider).
ORG_CLAIM = "tenant"
PERMISSIONS_CLAIM = "roles"
TEST_REDIRECT_URI = "http://127.0.0.1/test-callback"


def _unavailable(why: str) -> None:
    if services_required():
        pytest.fail(f"the test OpenID Provider is required (CI=true): {why}")
    pytest.skip(f"the test OpenID Provider cannot run here: {why}")


def _node_modules() -> None:
    """``npm ci`` from the lock file when the folder has no packages yet (CI installs them first)."""
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    found = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if found < MIN_NODE:
        _unavailable(f"oidc-provider needs Node.js >= {'.'.join(map(str, MIN_NODE))}, found {version or 'none'}")
    if (PROVIDER_DIR / "node_modules" / "oidc-provider" / "package.json").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        _unavailable("npm is not installed")
    result = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PROVIDER_DIR, capture_output=True,
                            text=True, check=False, timeout=300)
    if result.returncode != 0:
        _unavailable(f"npm ci failed: {result.stderr[-2000:]}")


@dataclass(frozen=True)
class SigningKey:
    kid: str
    alg: str
    private: Any

    def private_jwk(self) -> dict[str, Any]:
        algorithm = RSAAlgorithm if self.alg.startswith("RS") else ECAlgorithm
        jwk = algorithm.to_jwk(self.private, as_dict=True)
        # PyJWT marks a private key ["sign"] only; the provider also verifies with it (an id_token_hint).
        jwk.pop("key_ops", None)
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}


def make_key(alg: str, kid: str | None = None) -> SigningKey:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048) if alg == "RS256" \
        else ec.generate_private_key(ec.SECP256R1())
    return SigningKey(kid or f"{alg.lower()}-{secrets.token_hex(4)}", alg, private)


def make_keys() -> list[SigningKey]:
    return [make_key("RS256"), make_key("ES256")]


@dataclass(frozen=True)
class Client:
    client_id: str
    secret: str


@dataclass
class ProviderConfig:
    """Clients and users of a test provider. ``chat_url``: where the chat's page is (its login's
    redirect and logout URIs); ``ttl``: the lifetime of access tokens for the chat."""

    chat_url: str = "http://127.0.0.1:9"
    ttl: int = 300
    # More resource servers (indicator -> {"audience", "scope", "ttl"}): an MCP server's, for one.
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=lambda: {
        "alice": {"password": "wonderland", "org": "acme", "name": "Alice Liddell", "permissions": ["chat"]},
        "bob": {"password": "builder", "org": "globex", "name": "Bob Builder"},
    })


# Confidential clients of the provider: the chat's page (authorization code), API testers that get
# user tokens signed RS256 / ES256, the chat calling the Agent Service (client credentials) and a
# client whose tokens are for the chat, not the Agent Service.
CHAT_CLIENT = Client("taskforce-chat", "chat-client-secret-0123456789abcdef")
RS_TESTER = Client("api-tester-rs", "tester-rs-secret-0123456789abcdef")
ES_TESTER = Client("api-tester-es", "tester-es-secret-0123456789abcdef")
AGENT_CALLER = Client("chat-to-agent", "chat-to-agent-secret-0123456789")
# A sign-in client whose id is the Agent Service's audience (a single-app registration, as the chat's is):
# its ID tokens name that audience, and its users' access tokens are for the Agent Service.
AGENT_UI = Client(AGENT_AUDIENCE, "agent-ui-secret-0123456789abcdef")
CHAT_ONLY = Client("chat-only-service", "chat-only-secret-0123456789abcd")


class OpenIDProvider:
    """``node provider.mjs`` on a port of its own; ``restart`` keeps the port (and so the issuer)."""

    def __init__(self, tmp_path: Path, config: ProviderConfig | None = None, *, keys: list[SigningKey] | None = None,
                 port: int | None = None) -> None:
        _node_modules()
        self.tmp_path = tmp_path
        self.config = config or ProviderConfig()
        self.keys = keys or make_keys()
        self.port = port or free_port()
        self.proc: asyncio.subprocess.Process | None = None
        self._log = tmp_path / f"oidc-provider-{self.port}.log"

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _config_file(self) -> Path:
        chat = self.config.chat_url.rstrip("/")
        code_client = {"grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                       "token_endpoint_auth_method": "client_secret_basic"}
        clients = [
            {**code_client, "client_id": CHAT_CLIENT.client_id, "client_secret": CHAT_CLIENT.secret,
             "redirect_uris": [f"{chat}/auth/callback", TEST_REDIRECT_URI], "post_logout_redirect_uris": [f"{chat}/"]},
            *({**code_client, "client_id": c.client_id, "client_secret": c.secret,
               "redirect_uris": [TEST_REDIRECT_URI]} for c in (RS_TESTER, ES_TESTER, AGENT_UI)),
            *({"client_id": c.client_id, "client_secret": c.secret, "grant_types": ["client_credentials"],
               "response_types": [], "redirect_uris": [], "token_endpoint_auth_method": "client_secret_basic"}
              for c in (AGENT_CALLER, CHAT_ONLY)),
        ]
        document = {
            "port": self.port, "issuer": self.issuer, "keys": [key.private_jwk() for key in self.keys],
            "clients": clients, "users": self.config.users,
            "claim_names": {"org": ORG_CLAIM, "permissions": PERMISSIONS_CLAIM},
            "client_algs": {ES_TESTER.client_id: "ES256"},
            "resources": {
                CHAT_RESOURCE: {"audience": CHAT_AUDIENCE, "scope": "chat", "ttl": self.config.ttl},
                AGENT_RESOURCE: {"audience": AGENT_AUDIENCE, "scope": "agent", "ttl": 300},
                **self.config.resources,
            },
            "default_resource": {**{c.client_id: CHAT_RESOURCE for c in (CHAT_CLIENT, RS_TESTER, ES_TESTER)},
                                 AGENT_UI.client_id: AGENT_RESOURCE},
        }
        path = self.tmp_path / f"oidc-provider-{self.port}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        return path

    async def start(self, timeout: float = 20.0) -> None:
        log = self._log.open("ab")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                shutil.which("node") or "node", str(PROVIDER_DIR / "provider.mjs"), str(self._config_file()),
                cwd=PROVIDER_DIR, stdout=log, stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as http:
            while True:
                if self.proc.returncode is not None:
                    _unavailable(f"the provider exited with {self.proc.returncode}: {self.logs()[-3000:]}")
                try:
                    if (await http.get(f"{self.issuer}/.well-known/openid-configuration", timeout=1)).is_success:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    _unavailable(f"the provider did not answer within {timeout} s: {self.logs()[-3000:]}")
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self.proc = None

    async def restart(self, keys: list[SigningKey] | None = None) -> None:
        """Stopped and started again on the same port, with ``keys`` (the first of an algorithm signs)."""
        await self.stop()
        if keys is not None:
            self.keys = keys
        await self.start()

    def logs(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""

    async def jwks_fetches(self) -> int:
        async with httpx.AsyncClient() as http:
            return (await http.get(f"{self.issuer}/test/stats")).json()["jwks_fetches"]

    # -- tokens ---------------------------------------------------------------------------------

    async def client_credentials(self, client: Client, resource: str) -> str:
        async with httpx.AsyncClient() as http:
            response = await http.post(f"{self.issuer}/token", auth=(client.client_id, client.secret),
                                       data={"grant_type": "client_credentials", "resource": resource})
        assert response.status_code == 200, response.text
        return response.json()["access_token"]

    async def user_tokens(
        self, user: str = "alice", client: Client = RS_TESTER, scope: str = "openid profile chat offline_access",
    ) -> dict[str, Any]:
        """Authorization code with PKCE for ``user``, signing in on the provider's page: its access token
        (for the client's default resource), ID token (for the client) and refresh token."""
        password = self.config.users[user]["password"]
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        query = urlencode({
            "client_id": client.client_id, "response_type": "code", "redirect_uri": TEST_REDIRECT_URI,
            "scope": scope, "state": secrets.token_urlsafe(16),
            "nonce": secrets.token_urlsafe(16), "code_challenge": challenge, "code_challenge_method": "S256",
        })
        async with httpx.AsyncClient(base_url=self.issuer, follow_redirects=False) as http:
            location = (await http.get(f"/auth?{query}")).headers["location"]
            for _ in range(6):
                if location.startswith(TEST_REDIRECT_URI):
                    break
                path = urlsplit(location).path
                if path.startswith("/interaction/") and not path.endswith("/login"):
                    response = await http.post(f"{path}/login", data={"username": user, "password": password})
                else:
                    response = await http.get(location)
                location = response.headers["location"]
            code = parse_qs(urlsplit(location).query)["code"][0]
            response = await http.post("/token", auth=(client.client_id, client.secret), data={
                "grant_type": "authorization_code", "code": code, "redirect_uri": TEST_REDIRECT_URI,
                "code_verifier": verifier,
            })
        assert response.status_code == 200, response.text
        return response.json()

    async def user_token(self, user: str = "alice", client: Client = RS_TESTER) -> str:
        return (await self.user_tokens(user, client))["access_token"]

    def sign(self, claims: dict[str, Any], *, alg: str = "RS256", key: SigningKey | None = None,
             headers: dict[str, Any] | None = None) -> str:
        """A token signed with this provider's key of ``alg`` (or ``key``): claims the test sets exactly."""
        key = key or next(k for k in self.keys if k.alg == alg)
        return jwt.encode(claims, key.private, algorithm=key.alg, headers={"kid": key.kid, **(headers or {})})

    def claims(self, user: str = "alice", audience: str = CHAT_AUDIENCE, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        profile = self.config.users.get(user, {})
        claims = {"iss": self.issuer, "sub": user, "aud": audience, "iat": now, "exp": now + 300,
                  ORG_CLAIM: profile.get("org"), "jti": secrets.token_hex(8)}
        return {**claims, **overrides}


@contextlib.asynccontextmanager
async def running_provider(tmp_path: Path, config: ProviderConfig | None = None, **options: Any):
    provider = OpenIDProvider(tmp_path, config, **options)
    await provider.start()
    try:
        yield provider
    finally:
        await provider.stop()
