"""The built-in offline model: every decision rule, determinism, tool gating, streaming, usage."""

from __future__ import annotations

import asyncio
import time

import pytest

from shared.llm.base import (
    DEFAULT_OPTIONS,
    CompletionOptions,
    LLMDone,
    LLMMessage,
    LLMProvider,
    ReasoningDelta,
    TextDelta,
    ToolCall,
)
from shared.llm.builtin import BuiltinProvider, decide
from shared.llm.builtin.model import SKILLS
from shared.llm.builtin.skills.trips import TRIP_QUESTION
from shared.tokens import count_messages_tokens, count_tokens
from tests.unit.shared.builtin_transcripts import ALL_TOOLS, assistant, only_call, spec, tool_result, user


async def collect(provider: BuiltinProvider, messages, tools=ALL_TOOLS, options=DEFAULT_OPTIONS):
    return [e async for e in provider.stream(messages, tools=[spec(t) for t in tools], options=options)]


@pytest.fixture
def model() -> BuiltinProvider:
    return BuiltinProvider(first_token_delay=0, chunk_delay=0)


# ---- arithmetic -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "expression"),
    [
        ("what is 17*23", "17*23"),
        ("compute (2+3)**2", "(2+3)**2"),
        ("17 times 23", "17*23"),
        ("What is 100 divided by 8?", "100/8"),
        ("multiply 6 by 7", "6*7"),
        ("what is -5 + 3?", "-5+3"),
        ("what's the square root of 16", "sqrt(16)"),
        ("what is 1,000 plus 2", "1000+2"),
    ],
)
def test_arithmetic_calls_the_calculator_with_a_plan(question: str, expression: str) -> None:
    reply = decide([user(question)], ALL_TOOLS)
    call = only_call(reply)
    assert call.name == "calculator"
    assert call.arguments == {"expression": expression}
    assert expression in reply.reasoning and "calculator" in reply.reasoning


def test_arithmetic_answer_uses_the_tool_result() -> None:
    call = ToolCall(id="c1", name="calculator", arguments={"expression": "17*23"})
    transcript = [user("what is 17*23"), assistant("", call), tool_result(call, {"expression": "17*23", "result": 391})]
    reply = decide(transcript, ALL_TOOLS)
    assert reply.text == "17*23 = 391."
    assert reply.tool_calls == ()


def test_arithmetic_reports_a_tool_error() -> None:
    call = ToolCall(id="c1", name="calculator", arguments={"expression": "1/0"})
    transcript = [user("what is 1/0"), assistant("", call), tool_result(call, {"error": "division by zero"})]
    reply = decide(transcript, ALL_TOOLS)
    assert "division by zero" in reply.text and "1/0" in reply.text


@pytest.mark.parametrize(
    ("follow_up", "expression"), [("what is that plus 9", "391+9"), ("multiply it by 2", "391*2")]
)
def test_arithmetic_refers_to_the_previous_answer(follow_up: str, expression: str) -> None:
    transcript = [user("what is 17*23"), assistant("17*23 = 391."), user(follow_up)]
    assert only_call(decide(transcript, ALL_TOOLS)).arguments == {"expression": expression}


def test_arithmetic_without_the_tool_is_answered_in_text() -> None:
    reply = decide([user("what is 17*23")], [])
    assert reply.tool_calls == ()
    assert reply.text == "17*23 = 391."
    assert decide([user("what is 1/0")], []).text == "I can't compute 1/0: it is undefined or too large."


# ---- search, time --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "query"),
    [
        ("search for circuit breaker", "circuit breaker"),
        ("find information about retries", "retries"),
        ("look up SSE heartbeat", "SSE heartbeat"),
        ("What do the docs say about idempotency keys?", "idempotency keys"),
        ("search the docs for Last-Event-ID", "Last-Event-ID"),
    ],
)
def test_search_calls_knowledge_search(question: str, query: str) -> None:
    call = only_call(decide([user(question)], ALL_TOOLS))
    assert call.name == "knowledge_search"
    assert call.arguments == {"query": query}


def test_search_answer_cites_titles_and_snippets() -> None:
    call = ToolCall(id="k1", name="knowledge_search", arguments={"query": "breaker"})
    hits = {"query": "breaker", "results": [
        {"title": "Reliability", "path": "docs/reliability.md", "snippet": "the **breaker** opens after 5", "score": 2.0},
        {"title": "Operations", "path": "docs/ops.md", "snippet": "watch the **breaker** state", "score": 1.0},
    ]}
    reply = decide([user("search for breaker"), assistant("", call), tool_result(call, hits)], ALL_TOOLS)
    assert "Reliability (docs/reliability.md): the **breaker** opens after 5" in reply.text
    assert "Operations (docs/ops.md)" in reply.text


def test_search_answer_says_when_nothing_was_found() -> None:
    call = ToolCall(id="k1", name="knowledge_search", arguments={"query": "unicorns"})
    reply = decide([user("search for unicorns"), assistant("", call), tool_result(call, {"results": []})], ALL_TOOLS)
    assert reply.text == 'I found nothing in the documents about "unicorns".'


def test_time_calls_current_time_with_an_optional_zone() -> None:
    assert only_call(decide([user("what time is it?")], ALL_TOOLS)).name == "current_time"
    assert only_call(decide([user("What's the current time?")], ALL_TOOLS)).arguments == {}
    call = only_call(decide([user("what time is it in Europe/Lisbon?")], ALL_TOOLS))
    assert call.arguments == {"timezone": "Europe/Lisbon"}


def test_time_answer_reads_the_tool_result() -> None:
    call = ToolCall(id="t1", name="current_time", arguments={})
    result = {"timezone": "UTC", "iso": "2026-11-22T07:30:05+00:00", "date": "2026-11-22", "time": "07:30:05",
              "weekday": "Sunday"}
    reply = decide([user("what time is it"), assistant("", call), tool_result(call, result)], ALL_TOOLS)
    assert reply.text == "It is 07:30 (UTC) on Sunday, 2026-11-22."


# ---- files ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_text", "name"),
    [
        ("write that to a file", "answer.md"),
        ("Please save it as trip-plan.md", "trip-plan.md"),
        ("put your answer in notes.txt", "notes.txt"),
        ("can you export the result into a text file?", "answer.md"),
    ],
)
def test_a_request_to_save_the_answer_writes_the_previous_answer_to_a_file(request_text: str, name: str) -> None:
    transcript = [user("what is 17*23"), assistant("17*23 = 391."), user(request_text)]
    call = only_call(decide(transcript, ALL_TOOLS))
    assert (call.name, call.arguments) == ("create_file", {"name": name, "content": "17*23 = 391."})


def test_the_file_answer_reads_the_receipt_and_nothing_to_save_is_said() -> None:
    call = ToolCall(id="f1", name="create_file", arguments={"name": "notes.txt", "content": "x"})
    receipt = {"artifact_id": "a1", "name": "notes.txt", "media_type": "text/plain", "size": 12}
    reply = decide([user("hi"), assistant("Hello!"), user("save that to notes.txt"), assistant("", call),
                    tool_result(call, receipt)], ALL_TOOLS)
    assert reply.text == "I saved it as notes.txt (12 bytes); you can download it from this message."
    assert "nothing to write yet" in decide([user("write that to a file")], ALL_TOOLS).text
    assert "no file tool" in decide([user("hi"), assistant("Hello!"), user("save it to a file")], []).text


def test_words_about_files_that_ask_for_no_file_are_left_to_other_skills() -> None:
    for text in ("what is a file system?", "write a haiku", "save 17*23 for later"):
        assert all(c.name != "create_file" for c in decide([user("hi"), assistant("Hello!"), user(text)],
                                                            ALL_TOOLS).tool_calls), text


# ---- memory, summaries, fallback ------------------------------------------------------------


def test_remembers_the_users_name_from_the_transcript() -> None:
    transcript = [user("Hi, my name is Ada"), assistant("Nice to meet you, Ada!"), user("what is 2+2"),
                  assistant("2+2 = 4."), user("What is my name?")]
    assert decide(transcript, ALL_TOOLS).text == "Your name is Ada."
    assert "haven't told me" in decide([user("what is my name?")], ALL_TOOLS).text


def test_name_survives_history_compression_into_a_summary() -> None:
    transcript = [LLMMessage(role="system", content="Earlier: User: my name is Grace."), user("who am I?")]
    assert decide(transcript, ALL_TOOLS).text == "Your name is Grace."


def test_summary_purpose_gives_an_extractive_summary() -> None:
    conversation = (
        "user: hello there\nassistant: Hi! How can I help?\nuser: My name is Ada and I live in Lisbon.\n"
        "assistant: Nice to meet you.\nuser: We decided to ship on Friday. What is 17*23?\nassistant: 391."
    )
    reply = decide([LLMMessage(role="system", content="Summarize this."), user(conversation)], ALL_TOOLS,
                   purpose="summary")
    assert reply.tool_calls == ()
    assert "Ada" in reply.text and "Lisbon" in reply.text and "Friday" in reply.text and "391" in reply.text
    assert "hello there" not in reply.text
    assert len(reply.text) <= 600


async def test_the_summary_is_chosen_by_the_requests_purpose_not_its_prompt(model: BuiltinProvider) -> None:
    messages = [LLMMessage(role="system", content="Summarize the conversation below."),
                user("User: my name is Ada. We will ship on Friday.")]
    events = await collect(model, messages, tools=[], options=CompletionOptions(purpose="summary"))
    summary = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert summary == "User: my name is Ada. User: We will ship on Friday."
    assert decide(messages, ALL_TOOLS).text == "Nice to meet you, Ada! I'll remember your name."


def test_other_messages_get_a_short_reply_naming_the_offline_model() -> None:
    reply = decide([user("Tell me a joke about penguins")], ALL_TOOLS)
    assert reply.tool_calls == ()
    assert "built-in offline model" in reply.text
    assert "Tell me a joke about penguins" in reply.text


def test_tools_are_only_called_when_offered() -> None:
    for question in ["what is 17*23", "search for breaker", "what time is it", "plan a trip"]:
        for offered in ([], ["something_else"]):
            assert decide([user(question)], offered).tool_calls == (), question
    assert "search" in decide([user("search for breaker")], []).text


def test_each_tool_the_agent_offers_belongs_to_one_skill() -> None:
    from agent_service.tools.ask_user import AskUserTool
    from agent_service.tools.calculator import CalculatorTool
    from agent_service.tools.create_file import CreateFileTool
    from agent_service.tools.current_time import CurrentTimeTool
    from agent_service.tools.knowledge_search import KnowledgeSearchTool

    # share_link, emit_data and reply have no offline skill: nothing a user asks the offline model needs them.
    agent_tools = {tool.name for tool in (AskUserTool, CalculatorTool, CurrentTimeTool, KnowledgeSearchTool,
                                          CreateFileTool)}
    skill_tools = [skill.tool for skill in SKILLS if skill.tool is not None]
    assert sorted(skill_tools) == sorted(agent_tools) == sorted(ALL_TOOLS)


def test_identical_input_gives_identical_output() -> None:
    transcript = [user("my name is Ada"), assistant("Nice to meet you, Ada!"), user("what is 12*12")]
    first, second = decide(transcript, ALL_TOOLS), decide(list(transcript), list(ALL_TOOLS))
    assert first == second
    # A different transcript gets a different call id: ids stay unique across turns.
    other = decide(transcript[:-1] + [user("what is 12*13")], ALL_TOOLS)
    assert other.tool_calls[0].id != first.tool_calls[0].id


# ---- the provider: streaming and usage ------------------------------------------------------


async def test_provider_streams_text_in_several_chunks_then_done(model: BuiltinProvider) -> None:
    assert isinstance(model, LLMProvider)
    messages = [user("plan a trip to Lisbon")]
    events = await collect(model, messages)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 10
    assert "".join(d.text for d in deltas) == decide(messages, ALL_TOOLS).text
    done = events[-1]
    assert isinstance(done, LLMDone) and done.finish_reason == "stop"
    assert sum(isinstance(e, LLMDone) for e in events) == 1
    assert done.prompt_tokens == count_messages_tokens([("user", "plan a trip to Lisbon")])
    assert done.completion_tokens == count_tokens(decide(messages, ALL_TOOLS).text)


async def test_provider_streams_reasoning_then_the_tool_call(model: BuiltinProvider) -> None:
    events = await collect(model, [user("what is 17*23")])
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "ReasoningDelta" and kinds[-2:] == ["ToolCall", "LLMDone"]
    assert "TextDelta" not in kinds
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert "17*23" in reasoning
    assert events[-2].arguments == {"expression": "17*23"}
    assert events[-1].finish_reason == "tool_calls" and events[-1].completion_tokens > 0


async def test_provider_respects_max_tokens(model: BuiltinProvider) -> None:
    events = await collect(model, [user("plan a trip to Lisbon for 7 days")], options=CompletionOptions(max_tokens=5))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert count_tokens(text) <= 5 and text


async def test_provider_paces_its_stream() -> None:
    paced = BuiltinProvider(first_token_delay=0.05, chunk_delay=0.01)
    started = time.monotonic()
    stream = paced.stream([user("hello")])
    first = await anext(stream)
    first_at = time.monotonic() - started
    rest = [e async for e in stream]
    total = time.monotonic() - started
    assert isinstance(first, TextDelta)
    assert first_at >= 0.05
    chunks = 1 + sum(isinstance(e, TextDelta) for e in rest)
    assert total >= 0.05 + 0.01 * (chunks - 1)


async def test_concurrent_streams_do_not_interfere(model: BuiltinProvider) -> None:
    results = await asyncio.gather(*(collect(model, [user(f"what is {i}*3")]) for i in range(20)))
    for i, events in enumerate(results):
        assert events[-2].arguments == {"expression": f"{i}*3"}


def test_negative_delays_are_refused() -> None:
    with pytest.raises(ValueError):
        BuiltinProvider(first_token_delay=-1)


def test_results_in_the_run_engines_shapes() -> None:
    """The engine answers ask_user with {"answer": ...}, failures with {"error": ...}, and may cut
    long results short (no longer JSON)."""
    ask = ToolCall(id="a1", name="ask_user", arguments={"question": TRIP_QUESTION})
    reply = decide([user("plan a trip"), assistant("", ask), tool_result(ask, {"answer": "Porto, 2 days"})], ALL_TOOLS)
    assert reply.text.startswith("Here is a 2-day plan for Porto:")
    expired = decide([user("plan a trip"), assistant("", ask), tool_result(ask, {"error": "question expired"})],
                     ALL_TOOLS)
    assert "question expired" in expired.text and "plan" not in expired.text.lower()
    search = ToolCall(id="k1", name="knowledge_search", arguments={"query": "sse"})
    cut = decide([user("search for sse"), assistant("", search), tool_result(search, '{"query": "sse", "res …[truncated]')],
                 ALL_TOOLS)
    assert cut.text.startswith("The knowledge_search tool returned: ")
