"""Who uses the chat: bearer tokens (development HS256 tokens, or the identity provider's access
tokens, ``authenticator``), and the page's sign-in at the identity provider (``login``, ``sessions``,
``router``); ``guard`` reads them off a request or a WebSocket handshake."""
