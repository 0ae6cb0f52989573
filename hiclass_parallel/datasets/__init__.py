"""Layer 5: data sets -- a synthetic generator and WordNet 3.0 (tree, DAG and gloss data).

WordNet lives here whole: :mod:`._wordnet` loads the shipped file (no nltk needed), and
:mod:`.wordnet` builds the tree from WordNet files with nltk and rebuilds the shipped file
(``python -m hiclass_parallel.datasets.wordnet``).
"""

from ._wordnet import load_wordnet_dag, load_wordnet_glosses, load_wordnet_tree
from .synthetic import make_hierarchical_classification, random_tree

__all__: list[str] = []
__all__ += ["make_hierarchical_classification", "random_tree"]
__all__ += ["load_wordnet_tree", "load_wordnet_dag", "load_wordnet_glosses"]
