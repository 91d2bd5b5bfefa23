"""The built-in offline model: deterministic, streams like a real one, calls tools, asks questions.

It is the default provider, so the product runs end to end without any external model, and it is
what the tests drive. ``model.decide`` reads the transcript with one skill per thing the model can
do (``skills/``); a tool is only called when the request offers it, otherwise the model answers in
text. ``provider.BuiltinProvider`` streams the reasoning before a tool call as ``ReasoningDelta``
and the answer as ``TextDelta``, paced like a hosted model (configurable, 0 allowed).
"""

from shared.llm.builtin.model import decide
from shared.llm.builtin.provider import BuiltinProvider
from shared.llm.builtin.skill import BuiltinReply

__all__ = ["BuiltinProvider", "BuiltinReply", "decide"]
