"""``python -m agent_service --host H --port P`` serves the API; ``python -m agent_service migrate``
upgrades the database to the latest revision."""

from __future__ import annotations

import argparse
import asyncio
import sys

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from agent_service.settings import AgentServiceSettings
from shared.logging import configure_logging
from shared.serving import ServiceServer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agent_service", description="TaskForce Agent Service")
    parser.add_argument("command", nargs="?", choices=["serve", "migrate"], default="serve")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args(argv)

    settings = AgentServiceSettings()
    configure_logging("agent_service", settings.log_level)
    if args.command == "migrate":
        from agent_service.migrate import migrate_url

        asyncio.run(migrate_url(settings.database_url))
        return

    from agent_service.app import create_app

    app = create_app(settings)
    server = ServiceServer(uvicorn.Config(
        app, host=args.host, port=args.port, log_config=None, access_log=False,
        timeout_keep_alive=settings.keep_alive_timeout_s,
    ), app.state.shutdown)
    server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)


if __name__ == "__main__":
    main()
