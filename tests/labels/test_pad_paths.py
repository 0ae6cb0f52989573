"""Ragged label paths padded for model selection: ``pad_paths`` pads to one width with a pad
of the labels' own type, refuses what it cannot pad by name, and its output passes
scikit-learn's own check of ``y`` in ``GridSearchCV``."""

from __future__ import annotations

import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from hiclass_parallel import pad_paths


def test_pad_paths_makes_ragged_paths_model_selection_ready():
    ragged = [["food", "fruit", "apple"], ["tools"], ["food", "veg"]] * 10
    padded = pad_paths(ragged)
    assert padded.shape == (30, 3) and padded[1].tolist() == ["tools", "", ""]
    assert pad_paths([(1, 2), [3]]).tolist() == [[1, 2], [3, -1]]
    with pytest.raises(TypeError, match="path_sep"):
        pad_paths(["food/fruit"])
    with pytest.raises(ValueError, match="rows 1 are empty"):
        pad_paths([["a"], []])
    with pytest.raises(ValueError, match="hold the pad label ''"):
        pad_paths([["a", ""], ["b"]])
    from hiclass_parallel.estimators import HierarchicalClassifier

    texts = [" ".join(p) for p in ragged]
    model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(max_epochs=2, random_state=0))
    with pytest.raises(ValueError, match="legacy multi-label"):  # scikit-learn's own check of y
        GridSearchCV(model, {"hierarchicalclassifier__lr": [0.01]}, cv=3).fit(texts, ragged)
    search = GridSearchCV(model, {"hierarchicalclassifier__lr": [0.01]}, cv=3).fit(texts, padded)
    assert search.best_score_ > 0.5
