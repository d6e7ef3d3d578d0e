"""The few documents every adapter test orders, and the question."""

import numpy as np

# Three topics, interleaved so that no reading order is the input order by accident.
TEXTS = [
    "Captain Ahab hunted the white whale across the Pacific.",
    "Bread dough rises when the yeast ferments the sugar.",
    "The harpooner Queequeg threw his iron at the sperm whale.",
    "A sourdough starter needs flour, water and patience.",
    "The Pequod's crew boiled whale blubber into oil on deck.",
    "Rye bread is denser than wheat bread because of its gluten.",
    "Stars form in clouds of gas that collapse under gravity.",
    "Moby Dick destroyed the whaleboats and sank the Pequod.",
]
QUERY = "Which ship did the white whale sink?"



def synthetic_vectors(n, d, seed):
    """Random unit float32 vectors (n, d): embeddings a document could carry."""
    v = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)
