"""The torch side of the classifiers: the default modules (``_modules``), the skorch net and
its inference loop (``_net``), the batches it reads (``_data``: rows of ``X`` and node ids, a
batch at a time), the ``LazyAdam`` optimizer (``_optim``), the fused native training step of
the default text model (``_fused_step``) with its optional C kernel (``_path_step.c``, loaded
by ``_native_path_step``, which also holds LazyAdam's row update), a seeded fit's own random
generator (``_random``: no fit draws from torch's global one), and data-parallel training over
``torch.distributed`` (``_distributed``)."""
