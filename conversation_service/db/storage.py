"""The database as the lifespan started it (``app.state.storage``)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from shared.transactions import Transactions


@dataclass(frozen=True, slots=True)
class Storage:
    engine: AsyncEngine
    sessionmaker: async_sessionmaker
    # The turn leases' renewals and takeovers: a pool of their own (``create_lease_engine``).
    lease_sessionmaker: async_sessionmaker
    # Background work's transactions, run again while the database is briefly away.
    transactions: Transactions
