"""Token counting with a real BPE tokenizer that works offline (``bpe-openai`` ships its vocabularies
in the wheel), following OpenAI's chat accounting: a few tokens of framing per message."""

from __future__ import annotations

from functools import lru_cache

DEFAULT_ENCODING = "cl100k_base"
# Per-message framing in the chat format (<|start|>role ... <|end|>), as OpenAI documents it.
TOKENS_PER_MESSAGE = 4
TOKENS_PER_REPLY = 3


@lru_cache(maxsize=4)
def get_encoding(name: str = DEFAULT_ENCODING):
    # Imported at first use: loading the tokenizer takes up to a second, which a process that counts
    # no tokens (the operator's CLI, a migration) should not pay at start. A service that does count
    # loads it while it starts (``warm``), not in the middle of its first requests.
    import bpe_openai
    from bpe_openai import registry

    encoding = bpe_openai.get_encoding(name)
    # Importing bpe-openai reads every vocabulary it ships (cl100k, o200k, voyage3: ~66 MiB of Python
    # dicts) only to list their special tokens, and keeps them cached for ever; the Encoding holds its
    # own copy of the one it uses. Emptying those caches gives ~38 MiB back to each process; an
    # encoding asked for later is read again.
    registry._load_mergeable_ranks.cache_clear()
    for constructor in registry.ENCODING_CONSTRUCTORS.values():
        constructor.cache_clear()
    return encoding


def warm(name: str = DEFAULT_ENCODING) -> None:
    """Load the tokenizer now (0.4-1 s of CPU, holding the interpreter): a service calls it while it
    starts, so that its first burst of requests does not wait on it."""
    get_encoding(name)


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    if not text:
        return 0
    return len(get_encoding(encoding).encode_ordinary(text))


def count_message_tokens(role: str, content: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens one chat message costs in a prompt, framing included."""
    return TOKENS_PER_MESSAGE + count_tokens(role, encoding) + count_tokens(content, encoding)


def count_messages_tokens(messages: list[tuple[str, str]], encoding: str = DEFAULT_ENCODING) -> int:
    return sum(count_message_tokens(role, content, encoding) for role, content in messages) + TOKENS_PER_REPLY


def truncate_to_tokens(text: str, max_tokens: int, encoding: str = DEFAULT_ENCODING) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` tokens (cut on a token boundary)."""
    enc = get_encoding(encoding)
    tokens = enc.encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    return enc.decode(tokens[:max_tokens])
