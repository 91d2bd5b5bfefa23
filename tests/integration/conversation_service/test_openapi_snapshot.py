"""Backward compatibility of the chat API: every path, method and field of the committed
snapshot must still exist (additions are allowed). Regenerate deliberately with
``UPDATE_OPENAPI_SNAPSHOT=1``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conversation_service.app import create_app
from conversation_service.settings import ConversationSettings

SNAPSHOT = Path(__file__).with_name("openapi_snapshot.json")


def _shape(spec: dict) -> dict:
    paths = {p: sorted(m for m in ops if m in {"get", "post", "put", "patch", "delete"}) for p, ops in spec["paths"].items()}
    schemas = {name: sorted((s.get("properties") or {}).keys()) for name, s in spec["components"]["schemas"].items()}
    return {"paths": paths, "schemas": schemas}


def missing(old: dict, new: dict) -> list[str]:
    problems = []
    for path, methods in old["paths"].items():
        for method in methods:
            if method not in new["paths"].get(path, []):
                problems.append(f"{method.upper()} {path} removed")
    for name, fields in old["schemas"].items():
        if name not in new["schemas"]:
            problems.append(f"schema {name} removed")
            continue
        problems += [f"{name}.{f} removed" for f in fields if f not in new["schemas"][name]]
    return problems


def test_no_path_or_field_removed_or_renamed() -> None:
    current = _shape(create_app(ConversationSettings()).openapi())
    if os.environ.get("UPDATE_OPENAPI_SNAPSHOT") == "1":
        SNAPSHOT.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    committed = json.loads(SNAPSHOT.read_text())
    assert missing(committed, current) == []


def test_the_check_catches_a_rename() -> None:
    committed = json.loads(SNAPSHOT.read_text())
    renamed = json.loads(json.dumps(committed))
    renamed["schemas"]["MessageAccepted"] = [f if f != "message_id" else "messageId" for f in renamed["schemas"]["MessageAccepted"]]
    del renamed["paths"]["/conversations/{conversation_id}/messages"]
    assert "MessageAccepted.message_id removed" in missing(committed, renamed)
    assert any(p.endswith("/conversations/{conversation_id}/messages removed") for p in missing(committed, renamed))
