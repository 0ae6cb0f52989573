"""Calibrating the probability of the predicted answer on rows held out while training
(``_calibration``: :class:`~hiclass_parallel.estimators.BetaCalibrator` and its fitting)."""
