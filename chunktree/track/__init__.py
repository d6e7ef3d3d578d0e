"""Track: a dialogue as a forest of topic trees, and the coherent context for its next turn."""

from chunktree.track.context import Context
from chunktree.track.decide import ACTIONS, Decision, LLMJudge, Thresholds
from chunktree.track.forest import Forest, ForestFileError, LLMSummariser, Node

__all__ = ["ACTIONS", "Context", "Decision", "Forest", "ForestFileError", "LLMJudge", "LLMSummariser", "Node",
           "Thresholds"]
