"""Messages: the user posts, the reply is dispatched in the background and streams as frames."""
