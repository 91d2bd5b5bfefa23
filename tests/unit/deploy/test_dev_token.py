"""``python -m conversation_service token --user alice`` (the README's command) signs with the secret the
service it is meant for checks: ``AUTH_JWT_SECRET`` when set, else the one ``make run`` generated into
``var/dev-secrets.env``, else the public development secret; stderr says which."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jwt
import pytest

from conversation_service.settings import DEV_JWT_SECRET

# HS256 keys of at least 32 bytes, as run_local.py makes them (pyjwt warns about shorter ones).
MAKE_RUN_SECRET = "made-by-make-run-" + "m" * 32
OPERATOR_SECRET = "set-by-the-operator-" + "o" * 32


def _token(cwd: Path, **env: str) -> tuple[str, str]:
    clean = {k: v for k, v in os.environ.items() if k != "AUTH_JWT_SECRET"}
    done = subprocess.run(
        [sys.executable, "-m", "conversation_service", "token", "--user", "alice"],
        cwd=cwd, env={**clean, **env}, capture_output=True, text=True, check=True, timeout=60,
    )
    return done.stdout.strip(), done.stderr


def _signed_with(token: str, secret: str) -> bool:
    try:
        return jwt.decode(token, secret, algorithms=["HS256"])["sub"] == "alice"
    except jwt.InvalidSignatureError:
        return False


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A working directory as after `make run`: var/dev-secrets.env in the format run_local.py writes."""
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "dev-secrets.env").write_text(f"DEV_AGENT_API_KEY=agent-key\nDEV_JWT_SECRET={MAKE_RUN_SECRET}\n")
    return tmp_path


def test_without_auth_jwt_secret_the_token_is_signed_with_make_runs_secret(checkout: Path) -> None:
    token, stderr = _token(checkout)
    assert _signed_with(token, MAKE_RUN_SECRET)
    assert "var/dev-secrets.env" in stderr and "make run" in stderr, stderr


def test_auth_jwt_secret_wins_over_make_runs_secret(checkout: Path) -> None:
    token, stderr = _token(checkout, AUTH_JWT_SECRET=OPERATOR_SECRET)
    assert _signed_with(token, OPERATOR_SECRET) and not _signed_with(token, MAKE_RUN_SECRET)
    assert "AUTH_JWT_SECRET" in stderr and "dev-secrets.env" not in stderr, stderr


def test_without_either_the_public_development_secret_is_used_with_a_warning(tmp_path: Path) -> None:
    token, stderr = _token(tmp_path)
    assert _signed_with(token, DEV_JWT_SECRET)
    assert "warning" in stderr and "public development secret" in stderr, stderr


def test_with_an_identity_provider_no_development_token_is_printed(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AUTH_")}
    done = subprocess.run(
        [sys.executable, "-m", "conversation_service", "token", "--user", "alice"], cwd=tmp_path,
        env={**clean, "AUTH_OIDC_ISSUER": "https://idp.example.com/realms/acme", "AUTH_OIDC_AUDIENCE": "chat"},
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert done.returncode != 0 and done.stdout == ""
    assert "AUTH_OIDC_ISSUER is set" in done.stderr and "identity provider" in done.stderr
