"""The built-in model's memory skill: facts from the conversation or from recalled memory (system)."""

from __future__ import annotations

from shared.llm.base import LLMMessage
from shared.llm.builtin.model import decide

MEMORY = (
    "What the user told you in earlier conversations (most relevant first):\n"
    "- User: remember that my favourite colour is green / Assistant: I'll remember that your favourite colour is green."
)


def _answer(*messages: LLMMessage) -> str:
    return decide(list(messages)).text


def test_remember_is_acknowledged_in_the_second_person() -> None:
    assert _answer(LLMMessage("user", "Remember that my favourite colour is green.")) == (
        "I'll remember that your favourite colour is green."
    )


def test_a_fact_from_recalled_memory_or_the_conversation_is_said_back() -> None:
    assert _answer(LLMMessage("system", MEMORY), LLMMessage("user", "what is my favourite colour?")) == (
        "Your favourite colour is green."
    )
    said_now = [LLMMessage("system", MEMORY), LLMMessage("user", "my favourite colour is red"),
                LLMMessage("assistant", "ok"), LLMMessage("user", "What's my favorite color?")]
    assert _answer(*said_now) == "Your favorite color is red.", "the conversation's own statement wins"


def test_without_the_fact_it_says_so_and_never_reads_the_assistants_words() -> None:
    assistant_only = "- User: hello / Assistant: my favourite colour is blue"
    assert _answer(LLMMessage("system", assistant_only), LLMMessage("user", "what is my favourite colour?")) == (
        "I don't know your favourite colour yet. Tell me, and I'll remember it."
    )
    assert "name" in _answer(LLMMessage("user", "what is my name?")), "names stay with the names skill"
