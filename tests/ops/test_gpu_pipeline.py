"""Labels to paths and the paper's operations inside a scikit-learn Pipeline, on every array library.

The same pipeline runs on NumPy, torch (CPU and CUDA), array-api-strict and CuPy arrays; every
result stays in the input's library and device and equals the NumPy result. The CUDA and CuPy
cases skip with a reason on machines without a GPU.
"""

from __future__ import annotations

import numpy as np
from sklearn.pipeline import FunctionTransformer, make_pipeline

from hiclass_parallel import (
    PathEncoder,
    Tree,
    flatten_for_training,
    labels_to_paths,
    partition_scores,
)


def _host(x):
    """Any array as a NumPy array (CuPy's ``.get()``, torch's ``.cpu()``, else the array API)."""
    if hasattr(x, "get"):
        return x.get()
    if hasattr(x, "cpu"):
        return x.cpu().numpy()
    return np.asarray(x)


def _same_place(got, like):
    """The result is in the input's library and, for device arrays, on its device."""
    assert type(got).__module__.split(".")[0] == type(like).__module__.split(".")[0]
    if hasattr(like, "device") and hasattr(got, "device"):
        assert str(got.device) == str(like.device)


def test_path_encoder_and_paper_ops_in_a_pipeline(to_xp, random_tree):
    to = to_xp
    rng = np.random.default_rng(0)
    shape = random_tree(rng, 60)  # shuffled ids: id order says nothing about depth
    tree = Tree.from_parents(shape.parents, labels=[1000 + 7 * i for i in range(shape.n_classes)])
    labels = tree.labels[rng.integers(0, tree.n_classes, size=32)]
    scores = rng.standard_normal((32, tree.n_classes)).astype(np.float32)

    # PathEncoder is a target transformer (like LabelEncoder: fit(y)), so it encodes y on the
    # device beside the Pipeline; the Pipeline holds the paper's operations on X (scores).
    y = to(labels)
    encoder = PathEncoder(tree).fit(y)
    paths = encoder.transform(y)
    if type(y).__module__.split(".")[0] in ("numpy", "torch", "cupy"):  # what PathEncoder keeps in place
        _same_place(paths, y)
    np.testing.assert_array_equal(_host(paths), PathEncoder(tree).fit_transform(labels))
    back = encoder.inverse_transform(paths)
    if type(y).__module__.split(".")[0] in ("numpy", "torch", "cupy"):
        _same_place(back, y)
    np.testing.assert_array_equal(_host(back), labels)

    pipe = make_pipeline(FunctionTransformer(partition_scores, kw_args={"tree": tree}))
    X = to(scores)
    partitioned = pipe.fit_transform(X, y)
    _same_place(partitioned, X)
    ref_partitioned = partition_scores(scores, tree)
    np.testing.assert_array_equal(_host(partitioned), ref_partitioned)

    # The paper's training rows and targets from the two: one row per (sample, level) on a path.
    id_paths = labels_to_paths(to(tree.to_ids(labels)), tree)
    _same_place(id_paths, X)
    flat, level_targets = flatten_for_training(partitioned, id_paths)
    _same_place(flat, X)
    ref_flat, ref_targets = flatten_for_training(ref_partitioned, labels_to_paths(tree.to_ids(labels), tree))
    np.testing.assert_array_equal(_host(level_targets), ref_targets)
    np.testing.assert_array_equal(_host(flat), ref_flat)
