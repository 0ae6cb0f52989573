"""The torch side of the classifiers: the default modules (``_modules``), the skorch net and
its inference loop (``_net``), the batches it reads (``_data``: rows of ``X`` and node ids, a
batch at a time), the ``LazyAdam`` optimizer (``_optim``), the training engines (``engines/``:
torch, the fused C step, the device step; one protocol, chosen by the fit configuration), the
optional C kernel of the fused step (``_path_step.c``, loaded by ``_native_path_step``, which
also holds LazyAdam's row update), planning the next batch ahead (``_plan_ahead``), a seeded
fit's own random generator (``_random``: no fit draws from torch's global one), and
data-parallel training over ``torch.distributed`` (``_distributed``).
What a network class can do is read once, in ``_capabilities``.

This face names what the other parts of :mod:`hiclass_parallel.estimators` use.
"""

from ._capabilities import ModuleCapabilities, module_capabilities
from ._data import TreeDataset, collate_batch, split_target
from ._distributed import DataParallel, data_parallel_group
from ._modules import MLP, ColumnScorer, SparseLinear, SparseMLP, TextBatch
from ._net import TreeNet, module_kwargs
from ._optim import LazyAdam
from ._random import FitRandom, drawing_from, draws_from_fit_generator
from .engines import EngineRequest, choose

__all__ = ["MLP", "ColumnScorer", "DataParallel", "EngineRequest", "FitRandom", "LazyAdam", "ModuleCapabilities",
           "SparseLinear", "SparseMLP", "TextBatch", "TreeDataset", "TreeNet", "choose", "collate_batch",
           "data_parallel_group", "drawing_from", "draws_from_fit_generator", "module_capabilities", "module_kwargs",
           "split_target"]
