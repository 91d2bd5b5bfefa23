"""Chat users: HS256 bearer tokens (``sub`` = user id, ``org`` = organisation id)."""
