"""The engines' JSON serializer (orjson) against real SQLite and PostgreSQL columns: JSON on both,
JSONB on PostgreSQL, values read back as written."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Column, Integer, MetaData, Table, insert, select
from sqlalchemy.dialects.postgresql import JSONB

from shared.db import create_engine

VALUE: dict[str, Any] = {
    "text": "caf\u00e9 \U0001f600 \"quoted\"\nnew line \\ back",
    "nested": {"list": [1, 2.5, None, True, False], "empty": {}},
    "big": 2**53 + 1,
}


async def test_json_columns_round_trip_through_orjson(database_url: str) -> None:
    engine = create_engine(database_url)
    metadata = MetaData()
    table = Table(
        "json_round_trip", metadata, Column("id", Integer, primary_key=True), Column("plain", JSON),
        Column("binary", JSON().with_variant(JSONB(), "postgresql")),
    )
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            await conn.execute(
                insert(table),
                [{"id": 1, "plain": VALUE, "binary": VALUE}, {"id": 2, "plain": {1: "int key"}, "binary": [1, "a"]}],
            )
        async with engine.connect() as conn:
            rows = (await conn.execute(select(table).order_by(table.c.id))).all()
            # The database parsed the text as JSON itself: its own JSON operators see the fields.
            text = (await conn.execute(select(table.c.binary["text"].as_string()).where(table.c.id == 1))).scalar_one()
    finally:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
        await engine.dispose()
    assert text == VALUE["text"]
    assert rows[0].plain == VALUE
    assert rows[0].binary == VALUE
    # Non-string keys become strings, as with the standard library's json.
    assert rows[1].plain == {"1": "int key"}
    assert rows[1].binary == [1, "a"]
