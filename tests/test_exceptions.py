"""Every exception class lives in ``hiclass_parallel.exceptions``; the public namespaces that
export one give that very class."""

from __future__ import annotations

import pytest

from hiclass_parallel import exceptions


@pytest.mark.parametrize("namespace, name", [
    ("hiclass_parallel", "TreeError"),
    ("hiclass_parallel", "UnknownLabelError"),
    ("hiclass_parallel.estimators", "ModelFileError"),
    ("hiclass_parallel.estimators", "NonFiniteLossError"),
    ("hiclass_parallel.estimators", "DivergedError"),
    ("hiclass_parallel.estimators", "DivergenceWarning"),
    ("hiclass_parallel.estimators", "IgnoredSettingWarning"),
    ("hiclass_parallel.estimators", "UnsupportedEstimatorError"),
    ("hiclass_parallel.estimators", "NonMonotoneLossError"),
    ("hiclass_parallel.estimators.conformal", "UnsupportedEstimatorError"),
    ("hiclass_parallel.estimators.conformal", "NonMonotoneLossError"),
    ("hiclass_parallel.datasets.build_wordnet", "WordNetNotFoundError"),
])
def test_exported_exceptions_are_the_ones_of_the_exceptions_module(namespace, name):
    import importlib

    assert getattr(importlib.import_module(namespace), name) is getattr(exceptions, name)
    assert getattr(exceptions, name).__module__ == "hiclass_parallel.exceptions"
