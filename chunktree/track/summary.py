"""One-line summaries of conversation turns from an LLM, for the topic lines of a forest's context
(without one, ``Forest`` summarises a turn by its first sentence)."""

from __future__ import annotations

from typing import Any

SUMMARY_PROMPT = ("Summarise this conversation turn in one short line (at most 15 words), naming its topic. "
                  "Reply with the line only.\n\nUser: {user}\nAssistant: {assistant}")


class LLMSummariser:
    """One-line turn summaries from an OpenAI-compatible chat model (``ChatClient``)."""

    def __init__(self, llm: Any, *, max_tokens: int = 40) -> None:
        self.llm, self.max_tokens = llm, max_tokens

    def __call__(self, user: str, assistant: str | None) -> str:
        prompt = SUMMARY_PROMPT.format(user=user, assistant=assistant or "(no reply yet)")
        line = " ".join(self.llm.complete([{"role": "user", "content": prompt}], max_tokens=self.max_tokens).text.split())
        if not line:
            raise ValueError("an empty summary")
        return line
