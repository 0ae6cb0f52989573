"""Layer 6: data sets -- a synthetic generator and WordNet 3.0 (tree and gloss data)."""

from ._wordnet import load_wordnet_glosses, load_wordnet_tree
from .synthetic import make_hierarchical_classification, random_tree

__all__: list[str] = []
__all__ += ["make_hierarchical_classification", "random_tree"]
__all__ += ["load_wordnet_tree", "load_wordnet_glosses"]
