"""The torch side of the classifiers: the default modules (``_modules``), the skorch net and
its inference loop (``_net``), the ``LazyAdam`` optimizer (``_optim``) and the fused native
training step of the default text model (``_fused_step``)."""
