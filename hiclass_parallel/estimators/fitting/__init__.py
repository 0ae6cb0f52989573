"""Fitting a classifier: the one fit pipeline (prepare -> build -> train) and what it decides.

- ``_fit``: the pipeline, for arrays and torch datasets alike;
- ``_config``: the resolved :class:`~hiclass_parallel.estimators.FitConfig`, every fit-time
  decision made once (what a network class can do is read in ``networks/_capabilities``);
- ``_build``: the skorch net of a fit, built from its configuration; ``_params``: who owns
  which parameter and how it reaches the net;
- ``_targets``: the label encoders (``y`` in, training targets and the loss out) and the
  sample and class weights of what they encode; ``_streaming``: training from a torch
  ``Dataset`` or ``IterableDataset`` (data that does not fit in memory);
- ``_answer_fit``: the fit of the answer model (``answer_``): the flat term, the weights and
  calibrator chosen on the calibration share, the cross-fitting;
- ``_validation``: the fit's own checks of what an estimator is given (settings, the scale of
  ``X``, labels; the checks fit and predict share are ``estimators/_checks``);
  ``_guards``: the checks while and after training (finite loss, divergence, rollback).

This face names what the other parts of :mod:`hiclass_parallel.estimators` use: the public
estimators fit through :func:`run_fit` and :func:`run_grow`, ``io`` rebuilds a saved net with
:func:`build_net`, :func:`attach_net` and :class:`FitConfig`.
"""

from ._config import TRAINING, FitConfig, resolve_batch_size
from ._build import build_net
from ._fit import run_fit
from ._grow import run_grow
from ._guards import keep_fitted_state_on_error
from ._params import NetParamsMixin, attach_net
from ._targets import LabelSetTargets, PathTargets

__all__ = ["TRAINING", "FitConfig", "LabelSetTargets", "NetParamsMixin", "PathTargets", "attach_net", "build_net",
           "keep_fitted_state_on_error", "resolve_batch_size", "run_fit", "run_grow"]
