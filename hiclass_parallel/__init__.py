"""hiclass_parallel: hierarchical classification in parallel.

Layers, each importing only from the layers above it (``tests/test_layers.py`` checks every
import of the package against this list; modules on one line do not import each other):

1. :mod:`~hiclass_parallel.exceptions`, :mod:`~hiclass_parallel._backend`, :mod:`~hiclass_parallel._version` -- errors, array-namespace plumbing, the version;
2. :mod:`~hiclass_parallel.tree` -- :class:`Tree`, the class tree encoded once as arrays (``tree/_tree``: the class; ``tree/_arrays``: parents to depth and paths; ``tree/_constructors``: from edges, paths, mappings, networkx; ``tree/_labels``: labels and their look-ups; ``tree/_file``: its ``.npz`` file);
3. :mod:`~hiclass_parallel.ops`, :mod:`~hiclass_parallel.dag` -- tensor methods on NumPy, torch and CuPy arrays; hierarchies with several parents, unrolled into trees;
4. :mod:`~hiclass_parallel.datasets`, :mod:`~hiclass_parallel.labels`, :mod:`~hiclass_parallel.losses` -- synthetic data and WordNet 3.0 (its DAG of every hypernym too); the label readers (``labels/_paths``: labels and label paths; ``labels/_sets``: label sets); torch criteria;
5. :mod:`~hiclass_parallel.metrics` -- hierarchical metrics and scorers;
6. :mod:`~hiclass_parallel.estimators` -- the path encoder and the classifiers;
7. :mod:`~hiclass_parallel.demo` -- the demo: WordNet glosses, a classifier, a report;
8. :mod:`~hiclass_parallel.cli` -- the ``hiclass-parallel`` command.

Where each concept lives, one module each: every exception class in
:mod:`~hiclass_parallel.exceptions`; every reading of labels in ``labels/`` (``_paths``, ``_sets``, ``_unknown``; ``_pad``: ragged
paths padded for model selection).
In :mod:`~hiclass_parallel.estimators`, the public estimators at the top: ``classifier``,
``multilabel``, ``class_text``, ``conformal``, ``pipeline`` (:class:`HierarchicalPipeline`) and
``path_encoder`` (:class:`PathEncoder`), and
``explain`` (why an answer was given: each path step's features over its rival, per class the
features that raise it); the parts they compose in one sub-package each. Lowest first, each
part imports only from the parts before it, and another folder only through its face (its
``__init__``): ``_defaults`` < ``_checks`` < ``networks/`` < ``answer/`` < ``prediction/`` <
``fitting/`` < the public estimators < ``io/`` (the numbered list of
:mod:`hiclass_parallel.estimators`' docstring, checked by ``tests/test_layers.py``):

- ``estimators/_defaults``: every default, set in one place -- its value, the rule that
  applies it and the evidence for it, one row each;
- ``estimators/_checks``: the checks fit and predict share (``X``, the settings read at
  prediction, the rows per prediction batch, the device, scores a prediction can decide on);
- ``estimators/fitting/``: the fit pipeline (``_fit``), the resolved fit configuration
  (``_config``: the one place every fit-time choice is made -- the training route, the step
  engine and the fused update, the criterion and optimizer classes and their options, epochs,
  threads), building the net (``_build``) and
  who owns which parameter (``_params``), the label encoders and the sample and class weights
  of what they encode (``_targets``), training from torch datasets (``_streaming``), the fit's
  own checks of what an estimator is given (its settings, the scale of ``X``, its labels:
  ``_validation``), the guards while training (``_guards``) and the fit of the answer model
  (``_answer_fit``: the flat term, the weights and calibrator chosen on the calibration share
  by decoding it as ``predict`` will, the cross-fitting's fold models), the estimated costs that
  decide which re-ranking terms are tried within the budget (``_costs``) and growing a fitted
  model into a larger tree (``_grow``);
- ``estimators/prediction/``: the prediction methods (``_predict``) and the answer at predict
  time, decided in one place, by one dispatcher (``_decode``: model paths, re-ranking,
  decoding rule, output form; ``decoder_of`` reads the answer model);
- ``estimators/answer/``: the answer model, one fitted attribute ``answer_`` (``_model``:
  :class:`AnswerModel`, the terms, their weights, the scale of ``log p`` and the calibrator;
  ``_terms``: the one protocol every term follows -- fit on training rows,
  ``score(X, candidates)``, its arrays for saving and export); the terms: the class prototypes
  (``_prototypes``: the ``Prototypes`` protocol both kinds follow, the cosine kind, the
  re-ranking and the likelihood that fits its own weight and scale; ``_dense_prototypes``:
  the Gaussian kind; ``_fit_prototypes``: the rows they are built from, rows added when
  training continues) and the flat linear SVM of three kinds (``_flat_margins``); the answer
  calibrator and the held-out rows it is fitted on (``_calibration``); the weights learnt on
  held-out rows (``_joint``: the joint fit, a conditional logit over the candidates;
  ``_held_out``: where the learnt weights are set and recorded);
- ``estimators/networks/``: the torch modules (``_modules``) and what a module class can do,
  read once (``_capabilities``), the skorch net (``_net``: it holds
  one training engine and hands it every training step and epoch), the batches it reads
  (``_data``), the ``LazyAdam`` optimizer (``_optim``), the C kernel of the fused step with
  LazyAdam's row update (``_path_step.c``, loaded by ``_native_path_step``), planning the next
  batch while a step runs (``_plan_ahead``), a seeded fit's own random generator (``_random``),
  and data-parallel training (``_distributed``); ``networks/engines/``: the training engines,
  one protocol (``_protocol``: ``refusal``, ``choice``, ``begin``, ``step``, ``epoch``) and one
  module each, asked in order of preference by the configuration
  (``fitting/_config.resolve_engines``, where the engine is chosen, beside ``resolve_module``,
  the default network) -- per step, ``device/`` (CUDA with Triton: a few kernels reading a
  host-made fixed-shape plan, LazyAdam's row update inside, no synchronisation; ``_plan``,
  ``_step``, ``_kernels``, ``_engine``), ``_fused`` (CPU: forward, backward and sparse gradients
  in one C call, LazyAdam's update of the big layers inside unless something reads gradients;
  a batch it refuses runs through torch, counted), ``_torch`` (skorch's step: autograd, the
  optimizer's step); the model both kernels serve is read in ``_kernel_model``;
- ``estimators/io/``, above the public estimators (it saves them; loading builds them):
  saving without pickle (``_persistence``, ``_model_folder``,
  ``_conformal_persistence``; ``_whole_model``: a pipeline's scikit-learn parts through
  ``skops.io`` against an allow-list, around the classifier's own format) and export for
  serving (``_export``).

Importing the package sets ``OMP_WAIT_POLICY=PASSIVE`` in ``os.environ`` when the variable is
not set and torch is not loaded yet: torch's OpenMP threads then sleep instead of spinning while
they wait, which keeps training fast on cores shared with other processes (spinning threads
slow a fit several times over beside one busy process; see ``docs/gpu.md``, "CPU threads on a
shared machine"). Set the variable yourself (``ACTIVE``, or anything) to choose
otherwise; once torch is loaded its OpenMP runtime has read the variable and the package leaves
it alone.
"""

import os as _os
import sys as _sys

# Before anything below can import torch: libgomp reads the variable once, when torch loads it.
if "torch" not in _sys.modules:
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .exceptions import TreeError, UnknownLabelError
from .ops import flatten_for_training, labels_to_paths, partition_scores
from .ops import best_paths, group_log_softmax, n_outputs, node_log_probs, topk_paths
from .tree import PAD, PARTITIONS, Tree
from .labels._pad import pad_paths
from .estimators import PathEncoder

from . import metrics
from .metrics import (
    hierarchical_classification_report,
    hierarchical_f1_score,
    hierarchical_fbeta_score,
    hierarchical_precision_score,
    hierarchical_recall_score,
)

from ._version import __version__

__all__ = [
    "PAD",
    "PARTITIONS",
    "Tree",
    "TreeError",
    "UnknownLabelError",
    "partition_scores",
    "labels_to_paths",
    "pad_paths",
    "flatten_for_training",
    "n_outputs",
    "group_log_softmax",
    "node_log_probs",
    "best_paths",
    "topk_paths",
    "HierarchicalCrossEntropy",
    "PathEncoder",
    "HierarchicalClassifier",
    "ConformalHierarchicalClassifier",
    "metrics",
    "hierarchical_precision_score",
    "hierarchical_recall_score",
    "hierarchical_f1_score",
    "hierarchical_fbeta_score",
    "hierarchical_classification_report",
]


def __getattr__(name: str):
    # torch and skorch load on first use of the classifier, not on `import hiclass_parallel`.
    if name == "HierarchicalClassifier":
        from .estimators.classifier import HierarchicalClassifier

        return HierarchicalClassifier
    if name == "ConformalHierarchicalClassifier":
        from .estimators.conformal import ConformalHierarchicalClassifier

        return ConformalHierarchicalClassifier
    if name == "HierarchicalCrossEntropy":
        from .losses import HierarchicalCrossEntropy

        return HierarchicalCrossEntropy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
