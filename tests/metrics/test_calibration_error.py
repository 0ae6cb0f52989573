"""expected_calibration_error against a bin-by-bin loop, its edges and its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hiclass_parallel.metrics import expected_calibration_error


def _by_loop(correct, confidence, n_bins):
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        inside = [(c, r) for c, r in zip(confidence, correct) if lo <= c < hi or (b == n_bins - 1 and c == 1.0)]
        if inside:
            conf = sum(c for c, _ in inside) / len(inside)
            acc = sum(r for _, r in inside) / len(inside)
            total += abs(conf - acc) * len(inside)
    return total / len(confidence)


@pytest.mark.parametrize("n_bins", [1, 7, 15])
def test_equals_the_bin_by_bin_definition(n_bins):
    rng = np.random.default_rng(n_bins)
    confidence = np.concatenate([rng.uniform(size=500), [0.0, 1.0, 0.5]])
    correct = rng.uniform(size=confidence.size) < confidence**2
    ece, bins = expected_calibration_error(correct, confidence, n_bins=n_bins, return_bins=True)
    assert ece == pytest.approx(_by_loop(correct.tolist(), confidence.tolist(), n_bins), abs=1e-12)
    assert sum(b["count"] for b in bins) == confidence.size
    assert bins[-1]["hi"] == 1.0 and bins[0]["lo"] == 0.0  # 1.0 in the last bin, 0.0 in the first


def test_perfect_and_worst_and_torch_input():
    assert expected_calibration_error([True, False], [1.0, 0.0]) == 0.0
    assert expected_calibration_error([False, True], [1.0, 0.0]) == 1.0
    assert expected_calibration_error(torch.tensor([True, False]), torch.tensor([0.75, 0.25])) == pytest.approx(0.25)


@pytest.mark.parametrize(
    "correct, confidence, kwargs, message",
    [
        ([True, False], [0.5], {}, "2 samples and y_confidence 1"),
        ([], [], {}, "at least one sample"),
        ([True, True], [0.5, float("nan")], {}, "position 1 holds nan"),
        ([True], [1.5], {}, r"\[0, 1\]; position 0 holds 1.5"),
        ([True], [0.5], {"n_bins": 0}, "n_bins must be an integer >= 1"),
    ],
)
def test_bad_input_is_named(correct, confidence, kwargs, message):
    with pytest.raises(ValueError, match=message):
        expected_calibration_error(correct, confidence, **kwargs)
