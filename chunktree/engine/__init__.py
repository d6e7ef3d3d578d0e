"""The orchestration layer: documents, chunking, the embedding cache, the CLI."""
