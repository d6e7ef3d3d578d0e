"""Read: a Chain-of-Agents runner over the ordered chunks.

- ``reader``: ``read()``, the loop of worker steps and the manager's answer, and ``ReadResult``;
- ``memory``: the memory workers pass on (JSON, token budget) and the ``Step`` record;
- ``llm_worker``: the worker and manager over an LLM (prompts, packing chunks into the window);
- ``extractive``: the worker that needs no LLM (keeps the best sentences within the budget);
- ``llm``: ``ChatClient``, the OpenAI-compatible chat-completions client.
"""

from chunktree.engine.read.llm import ChatClient, LLMError
from chunktree.engine.read.reader import ReadResult, read

__all__ = ["ChatClient", "LLMError", "ReadResult", "read"]
