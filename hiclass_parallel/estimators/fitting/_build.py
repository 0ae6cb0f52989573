"""Building the skorch net of a fit from its resolved configuration.

:func:`build_net` reads the :class:`~._config.FitConfig` (module, partition, stops, training
route, step and update engines, lr, epochs, the optimizer and criterion classes and their
options), the fitted label encoder (tree, criterion, class rows) and the
estimator's prefixed skorch parameters, and returns an uninitialised :class:`~._net.TreeNet`.
It decides nothing the configuration already decided.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import numpy as np
import scipy.sparse as sp
from skorch.callbacks import EarlyStopping, ProgressBar
from skorch.dataset import ValidSplit
from torch.utils.data import DataLoader

from ...ops.groups import stop_columns
from ..networks import TreeNet, collate_batch, module_kwargs
from ._config import FitConfig
from ._guards import FiniteLossGuard
from ._params import net_param_names

__all__ = ["build_net", "net_params"]


def class_feature_rows(features: Any, targets: Any, config: FitConfig) -> sp.csr_matrix:
    """``module__class_features`` given with one row per class (``classes_`` order) as one row
    per score column: each node's class row, and under the sibling partition each stop column
    the row of the node whose children it ends at (better on WordNet than text-less stops:
    the text that names a node is evidence that the path ends there)."""
    n_classes = len(targets.classes)
    if features.shape[0] != n_classes:
        raise ValueError(
            f"module__class_features has {features.shape[0]} rows, but the classifier has {n_classes} classes: "
            "give one row per class, in the order of classes_ (the stop scores reuse their node's row)"
        )
    node_rows = targets.node_rows()
    rows = [node_rows]
    if config.stop and config.partition == "sibling":
        stop_col = stop_columns(targets.tree, "sibling")
        internal = np.flatnonzero(stop_col >= 0)
        rows.append(node_rows[internal[np.argsort(stop_col[internal])]])
    return sp.csr_matrix(features)[np.concatenate(rows)]


def _check_criterion_params(criterion: type, given: dict[str, Any], config: FitConfig) -> None:
    """A ``criterion__*`` parameter the criterion of this training route does not take is a
    named error (it once switched the route silently)."""
    takes = inspect.signature(criterion.__init__).parameters
    unknown = sorted(set(given) - set(takes))
    if unknown:
        hint = (" Path-local training uses PathLocalCrossEntropy; set training='full' to train with "
                "HierarchicalCrossEntropy and its parameters") if config.path_local else ""
        raise ValueError(
            f"{', '.join('criterion__' + k for k in unknown)}: not a parameter of {criterion.__name__}, the "
            f"criterion of training={config.training!r} (it takes {', '.join(sorted(set(takes) - {'self'}))}).{hint}"
        )


def net_params(estimator: Any, config: FitConfig) -> dict[str, Any]:
    """What the net takes from the estimator as it is: the parameters both share (lr,
    max_epochs and batch_size as resolved) and the prefixed ones but ``module__*``."""
    params = {name: getattr(estimator, name) for name in net_param_names(type(estimator))}
    params.update(lr=config.lr, max_epochs=config.max_epochs, batch_size=config.batch_size)
    params.update({k: v for k, v in estimator._skorch_kwargs().items() if not k.startswith("module__")})
    return params


def build_net(estimator: Any, config: FitConfig, targets: Any, seed: int | None) -> TreeNet:
    """The skorch net of a new fit (not initialised)."""
    module = config.module_class
    n_classes = targets.tree.n_classes
    n_stops = config.n_scores - n_classes
    sizes = {
        "n_features": (config.n_features, "features in X"),
        "n_outputs": (config.n_scores, (
            f"scores the tree needs ({n_classes} classes" + (f" + {n_stops} stops" if config.stop else "")
            + f", partition={config.partition!r})"
        )),
    }
    module_args = module_kwargs(module, estimator._skorch_kwargs("module__"), sizes)
    if module_args.get("class_features") is not None and sp.issparse(module_args["class_features"]):
        module_args["class_features"] = class_feature_rows(module_args["class_features"], targets, config)

    callbacks = [copy.deepcopy(cb) for cb in (estimator.callbacks or [])]
    train_split = estimator.train_split
    if estimator.early_stopping:
        if train_split is None:
            train_split = ValidSplit(estimator.validation_fraction, stratified=False, random_state=seed)
        callbacks.append(("early_stopping", EarlyStopping(
            monitor="valid_loss", patience=estimator.n_iter_no_change, threshold=estimator.tol, load_best=True
        )))
    if estimator.verbose:
        callbacks.append(("progress_bar", ProgressBar()))
    callbacks.append(("finite_loss", FiniteLossGuard()))  # a NaN/inf loss stops training, named

    kwargs = targets.criterion(config)
    _check_criterion_params(kwargs["criterion"], {**{k[len("criterion__"):]: v for k, v in kwargs.items()
                                                    if k.startswith("criterion__")},
                                                  **estimator._skorch_kwargs("criterion__")}, config)
    params = net_params(estimator, config)
    kwargs.update({f"optimizer__{k}": v for k, v in config.optimizer_options.items()})
    kwargs.update(iterator_train__shuffle=True, iterator_train__collate_fn=collate_batch,
                  iterator_valid__collate_fn=collate_batch)
    kwargs.update(params)  # the user's prefixed parameters win over the defaults above
    kwargs.update({f"module__{k}": v for k, v in module_args.items()})
    return TreeNet(
        module=module,
        optimizer=config.optimizer,
        train_split=train_split,
        callbacks=callbacks,
        warm_start=False,  # warm starts are the estimator's (fit continues net_)
        criterion__stop=config.stop,
        iterator_train=DataLoader,
        iterator_valid=DataLoader,
        predict_nonlinearity=None,
        n_scores=config.n_scores,
        path_local=config.path_local,
        step_engine=config.step_engine,
        update_engine=config.update_engine,
        plan_ahead=config.plan_ahead,
        softmax_sample=config.softmax_sample,
        **kwargs,
    )
