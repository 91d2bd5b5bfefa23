"""The built-in offline model: deterministic, streams like a real one, calls tools, asks questions.

The default provider, so the product runs end to end without an external model. ``model.decide``
reads the transcript with one skill per thing it can do (``skills/``); ``provider.BuiltinProvider``
streams the result, paced like a hosted model.
"""

from shared.llm.builtin.model import decide
from shared.llm.builtin.provider import BuiltinProvider
from shared.llm.builtin.skill import BuiltinReply

__all__ = ["BuiltinProvider", "BuiltinReply", "decide"]
