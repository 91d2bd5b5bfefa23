"""``python -m conversation_service dead-letters list | show ID | replay ID``.

``list`` and ``show`` read the conversation database directly (they work with the service down);
``replay`` asks the running service to replay (``dead_letters.replay`` says why it is the service's
job) and waits for the replayed turn to end. Exit status: 0 done, 1 refused or failed (the reason on
stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from typing import Any

import httpx

from conversation_service.agent_delegation.repository import DeadLetterRepository
from conversation_service.db.models import DeadLetter
from conversation_service.dead_letters.replay import replay_refusal
from conversation_service.dead_letters.router import OPERATOR_KEY_HEADER
from conversation_service.settings import ConversationSettings
from shared.db import create_engine, create_sessionmaker
from shared.transactions import transaction

MAX_LIST = 1000


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("dead-letters", help="list, show or replay failed agent delegations")
    commands = parser.add_subparsers(dest="dead_letters_command", required=True)
    listing = commands.add_parser("list", help="the newest dead letters, one a line")
    listing.add_argument("--pending", action="store_true", help="only letters not replayed yet")
    listing.add_argument("--limit", type=_limit, default=50, help=f"at most this many (1..{MAX_LIST}, default 50)")
    show = commands.add_parser("show", help="one dead letter in full, as JSON")
    show.add_argument("id")
    replay = commands.add_parser("replay", help="delegate the letter's message to the agent again (once)")
    replay.add_argument("id")
    replay.add_argument("--url", default="http://127.0.0.1:8000", help="the running ConversationService")
    replay.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the replayed turn")


def _limit(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= MAX_LIST:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_LIST}")
    return value


def run(args: argparse.Namespace) -> None:
    settings = ConversationSettings()
    if args.dead_letters_command == "list":
        letters = asyncio.run(_read(settings, lambda repo: repo.newest(args.limit, pending_only=args.pending)))
        for letter in letters:
            print(letter_line(letter))
        print(f"{len(letters)} dead letter(s)", file=sys.stderr)
    elif args.dead_letters_command == "show":
        letter = asyncio.run(_read(settings, lambda repo: repo.get(args.id)))
        if letter is None:
            sys.exit(_fail(f"no dead letter {args.id}"))
        print(json.dumps(letter_dict(letter), indent=2, sort_keys=True))
    else:
        _replay(settings, args)


async def _read(settings: ConversationSettings, query):
    engine = create_engine(settings.conversation_database_url)
    try:
        async with transaction(create_sessionmaker(engine)) as session:
            return await query(DeadLetterRepository(session))
    finally:
        await engine.dispose()


def letter_state(letter: DeadLetter) -> str:
    if letter.replayed_at is None:
        return "not replayable" if replay_refusal(letter) else "pending"
    return f"replayed: {letter.replay_outcome or 'no outcome yet'}"


def letter_line(letter: DeadLetter) -> str:
    return "\t".join([
        letter.id, letter.created_at.isoformat(timespec="seconds"), letter.error_code, f"attempts={letter.attempts}",
        f"conversation={letter.conversation_id}", letter_state(letter),
    ])


def letter_dict(letter: DeadLetter) -> dict[str, Any]:
    """Every column of the letter (times in ISO 8601) and its state."""
    columns = {column.key: getattr(letter, column.key) for column in DeadLetter.__table__.columns}
    shown = {key: value.isoformat() if isinstance(value, datetime) else value for key, value in columns.items()}
    return {**shown, "state": letter_state(letter)}


def _replay(settings: ConversationSettings, args: argparse.Namespace) -> None:
    key = settings.operator_api_key.get_secret_value()
    if not key:
        sys.exit(_fail("OPERATOR_API_KEY is not set: it must be the running service's", status=2))
    url = f"{args.url.rstrip('/')}/operator/dead-letters/{args.id}/replay"
    try:
        response = httpx.post(url, headers={OPERATOR_KEY_HEADER: key}, timeout=httpx.Timeout(args.timeout, connect=5.0))
    except httpx.HTTPError as exc:
        sys.exit(_fail(f"could not reach the ConversationService at {args.url}: {type(exc).__name__}"))
    if response.status_code != 200:
        sys.exit(_fail(f"replay refused ({response.status_code}): {_detail(response)}"))
    print(json.dumps(response.json(), indent=2, sort_keys=True))


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    return str(body.get("detail") or body.get("error")) if isinstance(body, dict) else str(body)[:500]


def _fail(message: str, status: int = 1) -> int:
    print(message, file=sys.stderr)
    return status
