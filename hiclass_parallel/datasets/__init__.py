"""Layer 6: data sets -- a synthetic generator and WordNet 3.0 (tree and gloss data)."""

__all__: list[str] = []
