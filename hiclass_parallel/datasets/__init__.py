"""Layer 5: data sets -- a synthetic generator and WordNet 3.0 (tree, DAG and gloss data).

WordNet lives here whole, in two modules, the builder importing the loader and not the other
way round: :mod:`.load_wordnet` loads the shipped file (no nltk needed), and
:mod:`.build_wordnet` builds the tree and the DAG from WordNet's own files with nltk and
rebuilds the shipped file (``python -m hiclass_parallel.datasets.build_wordnet``).
"""

from .load_wordnet import load_wordnet_dag, load_wordnet_glosses, load_wordnet_tree
from .synthetic import make_hierarchical_classification, random_tree

__all__: list[str] = []
__all__ += ["make_hierarchical_classification", "random_tree"]
__all__ += ["load_wordnet_tree", "load_wordnet_dag", "load_wordnet_glosses"]
