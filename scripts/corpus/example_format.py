"""How an example is written. Every example is a small dict ``{"task", "system", "user",
"assistant"}`` (an instruction plus some text in the user turn, the answer in the assistant
turn), and tool-use examples add ``"tools"`` (OpenAI tool dicts listed in the system turn),
``"history"`` (earlier messages after the user turn: a tool call and its ``tool`` result) and
``"tool_calls"`` (the calls of the final answer). Here: the one JSON spelling of answers, the
markdown fence some answers come in, and an example's chat messages."""

from __future__ import annotations

import json


def _dumps(obj) -> str:
    """The one JSON spelling of answers: ", " and ": " separators, UTF-8 kept as is."""
    return json.dumps(obj, ensure_ascii=False)


def unfence(text: str) -> str:
    """The text inside a markdown ```json fence (the way loosely worded requests' answers are
    written, whitespace around it allowed), or ``text`` unchanged when it is not fenced."""
    inner = text.strip()
    if inner.startswith("```json") and inner.endswith("```"):
        return inner[len("```json") : -len("```")].strip()
    return text


def to_messages(example: dict, with_answer: bool = True) -> list[dict]:
    """The chat messages of one example, in the Hugging Face ``[{"role", "content"}]`` form
    (pass ``example.get("tools")`` to the chat template alongside)."""
    msgs = []
    if example["system"]:
        msgs.append({"role": "system", "content": example["system"]})
    msgs.append({"role": "user", "content": example["user"]})
    msgs.extend(example.get("history", []))
    if with_answer:
        answer = {"role": "assistant", "content": example["assistant"]}
        if example.get("tool_calls"):
            answer["tool_calls"] = example["tool_calls"]
        msgs.append(answer)
    return msgs
