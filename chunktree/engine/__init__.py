"""The orchestration layer: one module (or package) per job, driving kernels/ and models/.

documents -> chunking -> embedding (through cache) -> inputs (the boundary every job enters by)
-> order | select (minibatch_kmeans) | read/ ; evaluate measures the orders with the shipped reader.
"""
