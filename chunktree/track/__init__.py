"""Track: a dialogue as a forest of topic trees, and the coherent context for its next turn."""

from chunktree.track.context import Context
from chunktree.track.decide import ACTIONS, Decision, LLMJudge, Thresholds
from chunktree.track.forest import Forest
from chunktree.track.storage import ForestFileError, Node
from chunktree.track.summary import LLMSummariser

__all__ = ["ACTIONS", "Context", "Decision", "Forest", "ForestFileError", "LLMJudge", "LLMSummariser", "Node",
           "Thresholds"]
