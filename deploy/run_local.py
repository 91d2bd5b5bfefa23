"""Start the product on its embedded defaults: `make run`.

Both services on loopback, SQLite files under ``var/``, in-process fan-out, the built-in offline
LLM. Development secrets (the Agent Service API key and the JWT secret) are generated once into
``var/dev-secrets.env`` so restarts keep working tokens; any variable already set in the
environment wins. Ctrl-C stops both services.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VAR = ROOT / "var"
SECRETS_FILE = VAR / "dev-secrets.env"


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


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"service behind {url} exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not become healthy within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--chat-port", type=int, default=int(os.environ.get("CHAT_PORT", 8000)))
    parser.add_argument("--agent-port", type=int, default=int(os.environ.get("AGENT_PORT", 8001)))
    parser.add_argument("--user", default="demo", help="user id of the printed development token")
    args = parser.parse_args()

    dev = load_dev_secrets()
    env = dict(os.environ)
    env.setdefault("AGENT_SERVICE_DATABASE_URL", f"sqlite+aiosqlite:///{VAR / 'agent_service.db'}")
    env.setdefault("CONVERSATION_DATABASE_URL", f"sqlite+aiosqlite:///{VAR / 'conversation_service.db'}")
    env.setdefault("AGENT_SERVICE_API_KEYS", dev["DEV_AGENT_API_KEY"])
    env.setdefault("AGENT_SERVICE_API_KEY", env["AGENT_SERVICE_API_KEYS"].split(",")[0])
    env.setdefault("AUTH_JWT_SECRET", dev["DEV_JWT_SECRET"])
    env.setdefault("AGENT_SERVICE_URL", f"http://{args.host}:{args.agent_port}")
    env.setdefault("LLM_PROVIDER", "builtin")
    chat_origin = f"http://{args.host}:{args.chat_port}"
    env.setdefault("WS_ALLOWED_ORIGINS", f"{chat_origin},http://localhost:{args.chat_port}")

    python = sys.executable
    for module in ("agent_service", "conversation_service"):
        subprocess.run([python, "-m", module, "migrate"], env=env, cwd=ROOT, check=True)

    procs: list[subprocess.Popen] = []

    def stop(*_: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise SystemExit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    agent_url = f"http://{args.host}:{args.agent_port}"
    chat_url = f"http://{args.host}:{args.chat_port}"
    procs.append(subprocess.Popen([python, "-m", "agent_service", "--host", args.host, "--port", str(args.agent_port)], env=env, cwd=ROOT))
    wait_healthy(agent_url, procs[-1])
    procs.append(subprocess.Popen([python, "-m", "conversation_service", "--host", args.host, "--port", str(args.chat_port)], env=env, cwd=ROOT))
    wait_healthy(chat_url, procs[-1])

    token = subprocess.run(
        [python, "-m", "conversation_service", "token", "--user", args.user],
        env=env, cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.strip()

    print(
        "\nTaskForce bridge is running (SQLite under var/, in-process fan-out, built-in offline LLM)\n"
        f"  chat page:      {chat_url}/?token={token}\n"
        f"  chat API:       {chat_url}/docs   (Authorization: Bearer <token>)\n"
        f"  agent service:  {agent_url}/docs  (X-API-Key from var/dev-secrets.env)\n"
        f"  dev token for user '{args.user}': {token}\n"
        "Try: '/agent what is 17*23', '@agent plan a trip', or a plain message. Ctrl-C stops both services.\n",
        flush=True,
    )
    while True:
        for proc in procs:
            if proc.poll() is not None:
                print(f"a service exited with code {proc.returncode}; stopping", file=sys.stderr)
                stop()
        time.sleep(0.5)


if __name__ == "__main__":
    main()
