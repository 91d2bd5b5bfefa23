"""The ConversationService database: ORM models, the unit of work, migrations."""
