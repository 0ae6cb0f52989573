"""The column scores of a batch: a later call reads the columns the last one scored."""

import torch

from hiclass_parallel.estimators.networks._modules import ColumnScorer


def test_matrix_after_a_call_that_scored_no_column():
    """Best-first decoding scores pairs, then falls back to every column for some rows: when the
    pair call scored no column, the fallback must score afresh, not index the empty block."""
    torch.manual_seed(0)
    head = ColumnScorer(4, 6)
    h = torch.randn(3, 4)
    score = head.scorer(h)
    empty = torch.zeros(0, dtype=torch.long)
    assert score(empty, empty).shape == (0,)
    rows, columns = torch.tensor([0, 2]), torch.arange(6)
    expected = head.block(h[rows], columns)
    torch.testing.assert_close(score.matrix(rows, columns), expected)
