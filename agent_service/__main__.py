"""``python -m agent_service --host H --port P [--workers N]`` serves the API; ``python -m agent_service
migrate`` upgrades the database to the latest revision; ``migrate --wait SECONDS`` only waits until it is
there (the init container of a Kubernetes Deployment, while the release's migration Job runs);
``python -m agent_service hash-key`` reads an API key on standard input and prints the SHA-256 an
``AGENT_SERVICE_CALLERS`` entry holds for it.

With ``--workers N`` (N > 1) a parent process migrates (when the settings say so, as a single process
would), binds the port once and runs N worker processes on it (``shared.workers``)."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import socket
import sys
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from agent_service.settings import AgentServiceSettings
from shared.logging import configure_logging
from shared.serving import ServiceServer
from shared.workers import mark_worker, serve_workers

log = logging.getLogger("agent_service")


def _server(settings: AgentServiceSettings, host: str, port: int) -> ServiceServer:
    from agent_service.app import create_app

    app = create_app(settings)
    mark_worker(app)
    return ServiceServer(uvicorn.Config(
        app, host=host, port=port, log_config=None, access_log=False,
        timeout_keep_alive=settings.keep_alive_timeout_s,
    ), app.state.shutdown)


def serve_worker(sock: socket.socket, _options: dict[str, Any]) -> None:
    """One worker of ``--workers N``: the service on the socket the parent bound."""
    settings = AgentServiceSettings()
    configure_logging("agent_service", settings.log_level)
    server = _server(settings, "127.0.0.1", 0)
    server.run(sockets=[sock])
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def _serve_workers(settings: AgentServiceSettings, args: argparse.Namespace) -> None:
    if settings.should_migrate_on_start:
        from agent_service.migrate import migrate_url

        # Once, here, before any worker starts: N workers migrating at once would race.
        try:
            asyncio.run(migrate_url(settings.database_url))
        except Exception:
            log.exception("migration failed; no worker started")
            sys.exit(STARTUP_FAILURE)
    os.environ["AGENT_SERVICE_MIGRATE_ON_START"] = "false"
    sys.exit(serve_workers(
        "agent_service.__main__:serve_worker", host=args.host, port=args.port, workers=args.workers,
        grace_s=settings.shutdown_grace_s, options={},
    ))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agent_service", description="TaskForce Agent Service")
    parser.add_argument("command", nargs="?", choices=["serve", "migrate", "hash-key"], default="serve")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", "1")),
                        help="worker processes serving the port (default: WORKERS or 1)")
    parser.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                        help="with migrate: do not migrate, wait until the database is migrated (exit 1 past SECONDS)")
    args = parser.parse_args(argv)
    if args.command == "hash-key":
        # From standard input, not an argument: a key on a command line lands in the shell's history.
        key = sys.stdin.readline().strip()
        if not key:
            parser.error("hash-key reads the key on standard input")
        print(hashlib.sha256(key.encode()).hexdigest())
        return

    settings = AgentServiceSettings()
    configure_logging("agent_service", settings.log_level)
    if args.command == "migrate":
        from agent_service.migrate import SCRIPT_LOCATION, migrate_url

        if args.wait is not None:
            from migrations import AGENT_VERSION_TABLE
            from migrations.wait import wait_for_schema

            migrated = asyncio.run(wait_for_schema(
                settings.database_url, SCRIPT_LOCATION, AGENT_VERSION_TABLE, timeout_s=args.wait))
            sys.exit(0 if migrated else "the agent database was not migrated to this release in time")
        asyncio.run(migrate_url(settings.database_url))
        return

    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.workers > 1:
        _serve_workers(settings, args)
        return
    server = _server(settings, args.host, args.port)
    server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)


if __name__ == "__main__":
    main()
