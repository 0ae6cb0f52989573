"""The former home of the WordNet builder, kept so ``hiclass_parallel.wordnet`` imports keep
working: building and loading WordNet now live together in :mod:`hiclass_parallel.datasets`
(:mod:`hiclass_parallel.datasets.wordnet` builds, ``load_wordnet_tree`` loads)."""

from .datasets.wordnet import (  # noqa: F401
    PARENT_RULE,
    WordNetData,
    WordNetNotFoundError,
    build_wordnet_tree,
    find_wordnet_data,
    read_wordnet,
)

__all__ = ["PARENT_RULE", "WordNetData", "WordNetNotFoundError", "build_wordnet_tree", "find_wordnet_data", "read_wordnet"]
