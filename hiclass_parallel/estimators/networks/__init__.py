"""The torch side of the classifiers: the default modules (``_modules``), the skorch net and
its inference loop (``_net``), the batches it reads (``_data``: rows of ``X`` and node ids, a
batch at a time), the ``LazyAdam`` optimizer (``_optim``), the training engines (``engines/``:
torch, the fused C step, the device step; one protocol, chosen by the fit configuration), the
optional C kernel of the fused step (``_path_step.c``, loaded by ``_native_path_step``, which
also holds LazyAdam's row update), planning the next batch ahead (``_plan_ahead``), a seeded
fit's own random generator (``_random``: no fit draws from torch's global one), and
data-parallel training over ``torch.distributed`` (``_distributed``)."""
