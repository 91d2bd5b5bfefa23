"""The ConversationService database: ORM models, the repository base, migrations (transactions: ``shared.transactions``)."""
