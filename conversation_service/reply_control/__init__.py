"""Control over a reply: stop it while it streams, or ask for another answer (regenerate, retry)."""
