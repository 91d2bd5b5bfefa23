"""Start the product on its embedded defaults: `make run`.

Both services on loopback (chat on CHAT_PORT or --chat-port, default 8000; Agent Service on AGENT_PORT
or --agent-port, default 8001), SQLite files under ``var/``, in-process fan-out, the built-in offline
LLM. Development secrets (the Agent Service API key and the JWT secret) are generated once into
``var/dev-secrets.env`` so restarts keep working tokens; any variable already set in the environment
wins.

It supervises the two services the way an orchestrator would: a service that exits is started again
after a back-off (1, 2, 4 ... 30 s) while the other keeps running, so the chat stays up with the Agent
Service down (it answers with the direct LLM and a notice). A port already in use stops it before
anything starts. Ctrl-C (SIGINT) or SIGTERM stops both services and exits with 0.

``make run WORKERS=N`` (or ``--workers N``) runs each service as N worker processes on its port. The
chat's workers fan frames out to each other through Redis, so N > 1 needs ``REDIS_URL`` (e.g.
``REDIS_URL=redis://127.0.0.1:6379/0 make run WORKERS=2``); without it, it stops at once and says so.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VAR = ROOT / "var"
SECRETS_FILE = VAR / "dev-secrets.env"
BACKOFF_S = (1, 2, 4, 8, 16, 30)
# A service that ran this long before it exited starts its back-off from the beginning again.
STABLE_S = 60.0


def say(message: str) -> None:
    print(f"make run: {message}", flush=True)


def load_dev_secrets() -> dict[str, str]:
    VAR.mkdir(exist_ok=True)
    values: dict[str, str] = {}
    if SECRETS_FILE.exists():
        for line in SECRETS_FILE.read_text().splitlines():
            key, _, value = line.partition("=")
            if key and value:
                values[key.strip()] = value.strip()
    changed = False
    for key in ("DEV_AGENT_API_KEY", "DEV_JWT_SECRET"):
        if key not in values:
            values[key] = secrets.token_urlsafe(32)
            changed = True
    if changed:
        SECRETS_FILE.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        SECRETS_FILE.chmod(0o600)
    return values


def answers_health(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


@dataclass
class Service:
    name: str
    module: str
    host: str
    port: int
    port_variable: str  # and its flag: AGENT_PORT, --agent-port
    workers: int = 1
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    failures: int = 0  # exits in a row, each after less than STABLE_S
    restart_at: float | None = None
    recovering: bool = False

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def check_port_free(self) -> None:
        family = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0][0]
        try:
            # SO_REUSEADDR as uvicorn: connections of an earlier run left in TIME_WAIT are no conflict.
            socket.create_server((self.host, self.port), family=family).close()
        except OSError as exc:
            earlier = " (it answers /health: an earlier `make run`?)" if answers_health(self.url) else ""
            flag = "--" + self.port_variable.lower().replace("_", "-")
            raise SystemExit(
                f"make run: the {self.name} port {self.port} on {self.host} is already in use{earlier}: "
                f"{exc.strerror}. Stop what uses it, or choose another port: "
                f"{self.port_variable}=<port> make run (or {flag} <port>)."
            ) from None

    def start(self, env: dict[str, str]) -> None:
        command = [sys.executable, "-m", self.module, "--host", self.host, "--port", str(self.port)]
        if self.workers > 1:
            command += ["--workers", str(self.workers)]
        self.proc = subprocess.Popen(command, env=env, cwd=ROOT)
        self.started_at = time.monotonic()
        say(f"{self.name} started (pid {self.proc.pid}) on {self.url}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)


class Supervisor:
    def __init__(self, services: list[Service], env: dict[str, str]) -> None:
        self.services = services
        self.env = env
        self.stopping = False
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGTERM, self.request_stop)

    def request_stop(self, *_: object) -> None:
        self.stopping = True

    def start(self, service: Service, timeout: float = 60.0) -> None:
        """Start a service and wait for its /health; a service that cannot start ends make run."""
        service.start(self.env)
        deadline = time.monotonic() + timeout
        while not self.stopping and time.monotonic() < deadline:
            if service.proc.poll() is not None:
                raise SystemExit(f"make run: the {service.name} exited during start-up with code "
                                 f"{service.proc.returncode} (its log is above)")
            if answers_health(service.url):
                return
            time.sleep(0.2)
        if not self.stopping:
            raise SystemExit(f"make run: the {service.name} did not answer {service.url}/health in time")

    def tend(self, service: Service, now: float) -> None:
        """Restart a service that exited, after its back-off; say when it answers again."""
        if service.restart_at is not None:
            if now >= service.restart_at:
                service.restart_at = None
                service.recovering = True
                service.start(self.env)
            return
        code = service.proc.poll()
        if code is None:
            if service.recovering and answers_health(service.url):
                service.recovering = False
                say(f"{service.name} is back on {service.url}")
            return
        if now - service.started_at >= STABLE_S:
            service.failures = 0
        delay = BACKOFF_S[min(service.failures, len(BACKOFF_S) - 1)]
        service.failures += 1
        service.restart_at = now + delay
        others = ", ".join(s.name for s in self.services if s is not service)
        say(f"{service.name} exited with code {code}; restarting it in {delay} s ({others} keeps running)")

    def watch(self) -> None:
        while not self.stopping:
            for service in self.services:
                self.tend(service, time.monotonic())
            time.sleep(0.2)

    def stop_all(self) -> None:
        for service in self.services:
            service.stop()
        for service in self.services:
            if service.proc is None:
                continue
            try:
                service.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                service.proc.kill()
                service.proc.wait()


def _environment(agent: Service, chat: Service) -> dict[str, str]:
    dev = load_dev_secrets()
    env = dict(os.environ)
    env.setdefault("AGENT_SERVICE_DATABASE_URL", f"sqlite+aiosqlite:///{VAR / 'agent_service.db'}")
    env.setdefault("CONVERSATION_DATABASE_URL", f"sqlite+aiosqlite:///{VAR / 'conversation_service.db'}")
    env.setdefault("AGENT_SERVICE_API_KEYS", dev["DEV_AGENT_API_KEY"])
    env.setdefault("AGENT_SERVICE_API_KEY", env["AGENT_SERVICE_API_KEYS"].split(",")[0])
    env.setdefault("AUTH_JWT_SECRET", dev["DEV_JWT_SECRET"])
    env.setdefault("AGENT_SERVICE_URL", agent.url)
    env.setdefault("LLM_PROVIDER", "builtin")
    env.setdefault("WS_ALLOWED_ORIGINS", f"{chat.url},http://localhost:{chat.port}")
    return env


def _port(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--chat-port", type=int, default=_port("CHAT_PORT", 8000))
    parser.add_argument("--agent-port", type=int, default=_port("AGENT_PORT", 8001))
    parser.add_argument("--user", default="demo", help="user id of the printed development token")
    parser.add_argument("--workers", type=int, default=_port("WORKERS", 1),
                        help="worker processes per service (N > 1 needs REDIS_URL)")
    args = parser.parse_args()
    if args.workers < 1:
        raise SystemExit("make run: WORKERS must be at least 1")
    if args.workers > 1 and not os.environ.get("REDIS_URL"):
        raise SystemExit(
            f"make run: WORKERS={args.workers} needs Redis: the chat's workers fan frames out to each other "
            "through it. Start one (redis-server) and run REDIS_URL=redis://127.0.0.1:6379/0 make run "
            f"WORKERS={args.workers}, or run without WORKERS."
        )

    agent = Service("agent service", "agent_service", args.host, args.agent_port, "AGENT_PORT")
    chat = Service("chat service", "conversation_service", args.host, args.chat_port, "CHAT_PORT")
    for service in (agent, chat):
        service.workers = args.workers
        service.check_port_free()
    env = _environment(agent, chat)
    supervisor = Supervisor([agent, chat], env)
    try:
        for service in (agent, chat):
            migrate = [sys.executable, "-m", service.module, "migrate"]
            if subprocess.run(migrate, check=False, env=env, cwd=ROOT).returncode and not supervisor.stopping:
                raise SystemExit(f"make run: migrating the {service.name} database failed (its log is above)")
        for service in (agent, chat):
            if not supervisor.stopping:
                supervisor.start(service)
        if not supervisor.stopping:
            if env.get("AUTH_OIDC_ISSUER"):
                _print_banner(chat.url, agent.url, args.user, None)
            else:
                token = subprocess.run(
                    [sys.executable, "-m", "conversation_service", "token", "--user", args.user],
                    env=env, cwd=ROOT, check=True, capture_output=True, text=True,
                ).stdout.strip()
                _print_banner(chat.url, agent.url, args.user, token)
            supervisor.watch()
    finally:
        supervisor.stop_all()


def _print_banner(chat_url: str, agent_url: str, user: str, token: str | None) -> None:
    """``token`` None: the chat signs in at the identity provider (AUTH_OIDC_ISSUER is set)."""
    page = f"{chat_url}/   (sign in at {os.environ.get('AUTH_OIDC_ISSUER')})" if token is None \
        else f"{chat_url}/?token={token}"
    print(
        "\nTaskForce bridge is running (SQLite under var/, in-process fan-out, built-in offline LLM)\n"
        f"  chat page:      {page}\n"
        f"  chat API:       {chat_url}/docs   (Authorization: Bearer <token>)\n"
        f"  agent service:  {agent_url}/docs  (X-API-Key from var/dev-secrets.env)\n"
        + (f"  dev token for user '{user}': {token}\n" if token else "")
        + "Try: '/agent what is 17*23', '@agent plan a trip', or a plain message. A service that stops is\n"
        "restarted; the chat keeps answering while the agent is down. Ctrl-C stops both services.\n",
        flush=True,
    )


if __name__ == "__main__":
    main()
