"""The former home of the WordNet builder, kept so ``hiclass_parallel.wordnet`` imports keep
working: building and loading WordNet now live together in :mod:`hiclass_parallel.datasets`
(:mod:`hiclass_parallel.datasets.wordnet` builds, ``load_wordnet_tree`` loads). Everything
the builder exports is re-exported here, so names added there (the DAG builder) work too."""

from .datasets import wordnet as _builder
from .datasets.wordnet import *  # noqa: F401,F403

__all__ = list(_builder.__all__)
