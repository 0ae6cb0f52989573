"""Fitting a classifier: the one fit pipeline (prepare -> build -> train) and what it decides.

- ``_fit``: the pipeline, for arrays and torch datasets alike;
- ``_config``: the resolved :class:`~hiclass_parallel.estimators.FitConfig`, every fit-time
  decision made once; ``_capabilities``: what a network class can do, read once;
- ``_build``: the skorch net of a fit, built from its configuration; ``_params``: who owns
  which parameter and how it reaches the net;
- ``_targets``: the label encoders (``y`` in, training targets and the loss out);
  ``_weights``: sample and class weights; ``_streaming``: training from a torch ``Dataset`` or
  ``IterableDataset`` (data that does not fit in memory);
- ``_validation``: every check of what an estimator is given (settings, ``X``, labels);
  ``_guards``: the checks while and after training (finite loss, divergence, rollback).
"""
