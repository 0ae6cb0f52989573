"""The label-set reader: every form of several labels per sample reads to one indicator
matrix and writes back in the user's form; errors name the problem."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hiclass_parallel.labels._sets import read_label_sets, write_label_sets


def ids_of(labels):
    index = {v: i for i, v in enumerate(labels)}
    return lambda values: np.asarray([index[v] for v in values], dtype=np.int64)


def test_every_form_reads_to_the_same_indicator():
    labels = ["a", "b", "c", "d"]
    expected = np.array([[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]], dtype=bool)
    forms = {
        "sets": [["a", "c"], ("b",), []],
        "indicator": expected.astype(int),
        "sparse": sp.csr_matrix(expected.astype(np.float32)),
    }
    for form, y in forms.items():
        indicator, got = read_label_sets(y, 4, ids_of(labels))
        assert got == form
        np.testing.assert_array_equal(indicator.toarray(), expected)
        back = write_label_sets(indicator, form, np.array(labels))
        again, _ = read_label_sets(back, 4, ids_of(labels))
        np.testing.assert_array_equal(again.toarray(), expected)
    single, form = read_label_sets(np.array(["b", None, "d"], dtype=object), 4, ids_of(labels))
    assert form == "labels" and single.toarray().nonzero()[1].tolist() == [1, 3]
    # a label named twice counts once; sets and scalars mix
    twice, form = read_label_sets([["a", "a"], "b"], 4, ids_of(labels))
    assert form == "sets" and twice.nnz == 2


def test_reader_errors_name_the_problem():
    to_ids = ids_of(["a", "b"])
    with pytest.raises(ValueError, match=r"shape \(1, 3\).*2 classes"):
        read_label_sets(np.zeros((1, 3)), 2, to_ids)
    with pytest.raises(ValueError, match="other than 0 and 1"):
        read_label_sets(np.array([[2, 0]]), 2, to_ids)
    with pytest.raises(ValueError, match=r"y\[1\] holds a nested"):
        read_label_sets([["a"], [["b"]]], 2, to_ids)
    with pytest.raises(ValueError, match="2-D array of <U1"):
        read_label_sets(np.array([["a", "b"]]), 2, to_ids)
