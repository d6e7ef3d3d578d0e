"""chunktree inside other frameworks' pipelines, one module per framework (each an optional extra):

- ``chunktree.integrations.langchain`` (``chunktree[langchain]``): a document compressor, a
  document transformer and ``Embeddings``;
- ``chunktree.integrations.llama_index`` (``chunktree[llama-index]``): node postprocessors (order,
  select) and a ``BaseEmbedding``;
- ``chunktree.integrations.haystack`` (``chunktree[haystack]``): a ranker and embedder components.

What they share (which vectors, the metadata they add) is ``integrations.common``.
"""
