"""chunktree: decide which chunks of a corpus an LLM pipeline sees, and in what order."""

from chunktree.checks import ChunktreeError
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.chunking import Chunk, chunk_documents
from chunktree.engine.documents import Document, DocumentError, read_paths, sample_documents
from chunktree.engine.embedding import EmbedStats, embed_texts
from chunktree.engine.embeddings_file import load_embeddings, write_embeddings
from chunktree.engine.minibatch_kmeans import MiniBatchKMeans
from chunktree.engine.order import OrderResult, order
from chunktree.engine.read import ChatClient, LLMError, ReadResult, read
from chunktree.engine.select import Cluster, SelectResult, select
from chunktree.models.embedder import Embedder
from chunktree.track.forest import Forest

__all__ = [
    "ChatClient",
    "Chunk",
    "ChunktreeError",
    "Cluster",
    "Document",
    "DocumentError",
    "EmbedStats",
    "Embedder",
    "EmbeddingCache",
    "Forest",
    "LLMError",
    "MiniBatchKMeans",
    "OrderResult",
    "ReadResult",
    "SelectResult",
    "chunk_documents",
    "embed_texts",
    "load_embeddings",
    "order",
    "read",
    "read_paths",
    "sample_documents",
    "select",
    "write_embeddings",
]
__version__ = "0.1.0"
