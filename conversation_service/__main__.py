"""``python -m conversation_service`` [--host H --port P --workers N] | migrate | token --user U [--org O]
| dead-letters list | show ID | replay ID.

With ``--workers N`` (N > 1) a parent process migrates (when the settings say so), binds the port once
and runs N worker processes on it (``shared.workers``). The workers fan frames out to each other's
WebSockets through Redis, so N > 1 needs ``REDIS_URL``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

# `make run` (deploy/run_local.py, run from the repository root) generates the development secrets
# here and starts this service with AUTH_JWT_SECRET=DEV_JWT_SECRET.
DEV_SECRETS_FILE = Path("var/dev-secrets.env")


def _run(host: str, port: int, sock: socket.socket | None) -> None:
    """The service in this process: on ``host:port``, or on ``sock`` (a worker of ``--workers N``)."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    from conversation_service.app import create_app
    from conversation_service.settings import ConversationSettings
    from conversation_service.websocket.protocol import server_options
    from shared.logging import configure_logging
    from shared.serving import ServiceServer
    from shared.workers import mark_worker

    settings = ConversationSettings()
    configure_logging("conversation_service", settings.log_level)
    app = create_app(settings)
    mark_worker(app)
    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, timeout_keep_alive=settings.keep_alive_timeout_s,
        **server_options(settings),
    )
    server = ServiceServer(config, app.state.shutdown)
    try:
        server.run(sockets=[sock] if sock is not None else None)
    except KeyboardInterrupt:  # as uvicorn.run: Ctrl-C is a normal way to stop
        pass
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def serve_worker(sock: socket.socket, _options: dict[str, Any]) -> None:
    """One worker of ``--workers N``: the service on the socket the parent bound."""
    _run("127.0.0.1", 0, sock)


def _serve(args: argparse.Namespace) -> None:
    if args.workers < 1:
        sys.exit("--workers must be at least 1")
    if args.workers == 1:
        _run(args.host, args.port, None)
        return
    from uvicorn.config import STARTUP_FAILURE

    from conversation_service.db import migrate
    from conversation_service.settings import ConversationSettings
    from shared.logging import configure_logging
    from shared.workers import serve_workers

    settings = ConversationSettings()
    configure_logging("conversation_service", settings.log_level)
    if not settings.redis_url:
        # Without Redis each worker fans frames out to its own WebSockets only: a chat tab would
        # miss the replies another worker streams.
        sys.exit(
            f"--workers {args.workers} needs REDIS_URL: the workers fan chat frames out to each other's "
            "WebSockets through Redis. Set REDIS_URL, or run one worker."
        )
    if settings.should_migrate_on_start:
        # Once, here, before any worker starts: N workers migrating at once would race.
        try:
            asyncio.run(migrate.upgrade_url(settings.conversation_database_url, "head"))
        except Exception:
            logging.getLogger("conversation_service").exception("migration failed; no worker started")
            sys.exit(STARTUP_FAILURE)
    os.environ["MIGRATE_ON_START"] = "false"
    sys.exit(serve_workers(
        "conversation_service.__main__:serve_worker", host=args.host, port=args.port, workers=args.workers,
        grace_s=settings.shutdown_grace_s, options={},
    ))


def _migrate(args: argparse.Namespace) -> None:
    from conversation_service.db import migrate
    from conversation_service.settings import ConversationSettings

    settings = ConversationSettings()
    if args.wait is not None:
        from migrations import CONVERSATION_VERSION_TABLE
        from migrations.wait import wait_for_schema

        migrated = asyncio.run(wait_for_schema(
            settings.conversation_database_url, migrate.MIGRATIONS_DIR, CONVERSATION_VERSION_TABLE, timeout_s=args.wait))
        sys.exit(0 if migrated else "the conversation database was not migrated to this release in time")
    asyncio.run(migrate.upgrade_url(settings.conversation_database_url, args.revision))
    print(f"conversation database migrated to {args.revision}", file=sys.stderr)


def _signing_secret(settings) -> tuple[str, str]:
    """The secret of the service the token is for, and what to tell the user about it."""
    if "auth_jwt_secret" in settings.model_fields_set:
        return settings.auth_jwt_secret.get_secret_value(), "signed with AUTH_JWT_SECRET"
    if DEV_SECRETS_FILE.is_file():
        for line in DEV_SECRETS_FILE.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "DEV_JWT_SECRET" and value.strip():
                return value.strip(), f"signed with `make run`'s DEV_JWT_SECRET ({DEV_SECRETS_FILE})"
    return settings.auth_jwt_secret.get_secret_value(), (
        f"warning: AUTH_JWT_SECRET is not set and there is no {DEV_SECRETS_FILE}; "
        "signed with the public development secret"
    )


def _token(args: argparse.Namespace) -> None:
    from conversation_service.auth.tokens import issue_token
    from conversation_service.settings import ConversationSettings

    settings = ConversationSettings()
    if settings.oidc.enabled:
        # The service takes only the identity provider's tokens then: a development token would be refused.
        raise SystemExit("AUTH_OIDC_ISSUER is set: the chat API takes the identity provider's access tokens "
                         "only; get one from the provider (the page signs in there)")
    secret, note = _signing_secret(settings)
    print(note, file=sys.stderr)
    ttl = args.ttl if args.ttl is not None else settings.dev_token_ttl_s
    print(issue_token(secret, args.user, args.org, ttl_s=ttl))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m conversation_service", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", "1")),
                        help="worker processes serving the port (default: WORKERS or 1); N > 1 needs REDIS_URL")
    sub = parser.add_subparsers(dest="command")
    m = sub.add_parser("migrate", help="upgrade the conversation database")
    m.add_argument("revision", nargs="?", default="head")
    m.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                   help="do not migrate: wait until the database is migrated to this release (exit 1 past SECONDS)")
    t = sub.add_parser("token", help="print a development JWT for a user")
    t.add_argument("--user", required=True)
    t.add_argument("--org", default=None)
    t.add_argument("--ttl", type=int, default=None, help="lifetime in seconds")
    from conversation_service.dead_letters import cli as dead_letters

    dead_letters.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "migrate":
        _migrate(args)
    elif args.command == "dead-letters":
        dead_letters.run(args)
    elif args.command == "token":
        _token(args)
    else:
        _serve(args)


if __name__ == "__main__":
    main()
