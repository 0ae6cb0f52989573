"""Guards of :class:`~hiclass_parallel.estimators.HierarchicalClassifier`: nothing silently wrong.

Kept out of ``classifier.py`` so that the classifier calls each guard in one line:

- :class:`FiniteLossGuard`, a skorch callback: a non-finite training or validation loss stops
  training with :class:`NonFiniteLossError`, which says what to change; a finite loss that
  ends a fit 10x above where it started gets a ``RuntimeWarning``;
- :func:`keep_fitted_state_on_error` and :func:`keep_net_on_error`: a fit that fails (bad
  input, a diverging loss, a callback's error, Ctrl-C) leaves the estimator as it was before
  the call, its fitted attributes and the net trained in place alike;
- :func:`mean_loss` and :func:`warn_if_worse`: continued training that leaves the model much
  worse on the rows it trained on gets a :class:`~hiclass_parallel.exceptions.DivergenceWarning`;
- :func:`check_trained_scores` (after fit; predict's own is
  :func:`~hiclass_parallel.estimators._checks.check_decidable`): finite input scored NaN or
  infinite means training diverged: :class:`DivergedError`, never empty paths.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Iterator
from typing import Any

from skorch.callbacks import Callback

from ...exceptions import DivergedError, DivergenceWarning, NonFiniteLossError
from .._checks import diverged_message
from ..networks import split_target

__all__ = [
    "FiniteLossGuard",
    "check_trained_scores",
    "fitted_attributes",
    "keep_fitted_state_on_error",
    "keep_net_on_error",
    "mean_loss",
    "warn_if_worse",
]


class FiniteLossGuard(Callback):
    """Stop training at the first non-finite loss, with an error that says what to change.

    A batch whose loss is NaN or infinite raises :class:`NonFiniteLossError` naming the epoch,
    the batch, the learning rate and what to change. Nothing is copied here: the fit that
    raises puts the whole estimator back as it was before the call (a fresh fit never touched
    the previous net; a continued one is restored by :func:`keep_net_on_error`).
    """

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        self.first_epoch_ = len(net.history)

    def on_train_end(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        # Finite but exploding: the loss of this run's last epoch is 10x its first.
        losses = [row.get("train_loss") for row in net.history[getattr(self, "first_epoch_", 0):]]
        losses = [v for v in losses if v is not None]
        if len(losses) >= 3 and losses[-1] > 10 * max(losses[0], 1e-12):
            warnings.warn(
                f"the training loss grew from {losses[0]:.4g} to {losses[-1]:.4g} over {len(losses)} epochs "
                f"(lr={getattr(net, 'lr', None)}): training is diverging. Lower lr, or scale X (e.g. StandardScaler)",
                RuntimeWarning,
                stacklevel=2,
            )

    def on_epoch_begin(self, net: Any, dataset_train: Any = None, dataset_valid: Any = None, **kwargs: Any) -> None:
        self.batch_ = 0

    def on_batch_end(self, net: Any, batch: Any = None, training: bool = False, **kwargs: Any) -> None:
        self.batch_ = getattr(self, "batch_", 0) + 1
        loss = kwargs.get("loss")
        if loss is None:
            return
        value = float(loss.detach()) if hasattr(loss, "detach") else float(loss)
        if math.isfinite(value):
            return
        epoch = len(net.history)
        phase = "training" if training else "validation"
        raise NonFiniteLossError(
            f"the {phase} loss became {value} at epoch {epoch}, batch {self.batch_} (lr={getattr(net, 'lr', None)}): training "
            "diverged. Lower lr (e.g. by 10x), scale X (e.g. StandardScaler), or check X and the module for "
            "NaN/inf; the model was put back as it was before this call"
        )


def fitted_attributes(estimator: Any) -> list[str]:
    """The names of the estimator's fitted attributes: those ending in ``_`` (private ones such as
    ``_rng_state_`` included), not dunders."""
    return [k for k in vars(estimator) if k.endswith("_") and not k.startswith("__")]


@contextlib.contextmanager
def keep_fitted_state_on_error(estimator: Any) -> Iterator[None]:
    """On an exception inside, put the estimator's fitted attributes back as they were.

    Fitted attributes are those of :func:`fitted_attributes` (``net_``, ``tree_``,
    ``n_features_in_``...). A failed first fit leaves none; a failed refit leaves the previous
    model in place rather than half of a new one (``n_features_in_`` of the new ``X`` without
    a ``net_``). Only the references are put back: what a fit changes in place (the net it
    continues) is restored by :func:`keep_net_on_error`, and the prototypes are built into a
    new object that replaces the old one only when training succeeded.
    """
    before = {k: getattr(estimator, k) for k in fitted_attributes(estimator)}
    try:
        yield
    except BaseException:
        for key in fitted_attributes(estimator):
            if key not in before:
                delattr(estimator, key)
        vars(estimator).update(before)
        raise


@contextlib.contextmanager
def keep_net_on_error(net: Any) -> Iterator[None]:
    """On an exception inside (``KeyboardInterrupt`` included), put the skorch ``net`` back as it was.

    Continuing training changes the fitted net in place: its modules' weights and buffers, its
    optimizers' states (moments, step counts) and parameter groups (``lr``), its history, and
    its attributes (parameters handed over, a criterion or optimizer built anew for a changed
    ``criterion__*``). The tensors are copied once here, for the whole call (one more copy of
    the weights and of the optimizer state while it runs), and copied back *into the same
    tensors*, so that whatever holds them (the optimizer holds the parameters, a fused step
    the moments) sees the restored values. The callbacks' own counters (an early-stopping
    patience, a learning-rate schedule) are not restored.
    """
    import torch

    attributes = dict(vars(net))
    n_epochs = len(net.history)
    modules = [getattr(net, name + "_", None) for name in (*net._modules, *net._criteria)]
    modules = [m for m in modules if isinstance(m, torch.nn.Module)]
    weights = [(m, {k: v.detach().clone() for k, v in m.state_dict().items()},
                [(p, p.grad) for p in m.parameters()]) for m in modules]
    optimizers = [getattr(net, name + "_", None) for name in net._optimizers]
    moments = [(opt, {p: {k: v.clone() if torch.is_tensor(v) else copy.deepcopy(v) for k, v in state.items()}
                      for p, state in opt.state.items()},
                [{k: copy.deepcopy(v) for k, v in group.items() if k != "params"} for group in opt.param_groups])
               for opt in optimizers if isinstance(opt, torch.optim.Optimizer)]
    try:
        yield
    except BaseException:
        for key in [k for k in vars(net) if k not in attributes]:
            delattr(net, key)
        vars(net).update(attributes)
        del net.history[n_epochs:]
        with torch.no_grad():
            for module, state, grads in weights:
                module.load_state_dict(state)  # copies into the module's own tensors
                for p, grad in grads:
                    p.grad = grad
            for opt, state, groups in moments:
                for p in [p for p in opt.state if p not in state]:
                    del opt.state[p]
                for p, saved in state.items():
                    live = opt.state[p]
                    for key in [k for k in live if k not in saved]:
                        del live[key]
                    for key, value in saved.items():
                        now = live.get(key)
                        if torch.is_tensor(now) and torch.is_tensor(value) and now.shape == value.shape \
                                and now.dtype == value.dtype:
                            now.copy_(value)
                        else:
                            live[key] = value
                for group, saved in zip(opt.param_groups, groups):
                    group.update(saved)
        raise


def check_trained_scores(net: Any, dataset: Any, n_rows: int = 64) -> None:
    """Raise :class:`DivergedError` when the trained network scores the first rows of its
    training data (at most ``n_rows``, finite by validation) as NaN or infinity.

    A finite loss does not prove a usable model: weights of 1e20 keep the loss finite and
    overflow every score, and such a model would predict empty paths without a word.
    """
    import torch
    from torch.utils.data import IterableDataset, Subset

    if isinstance(dataset, IterableDataset) or len(dataset) == 0:
        return  # a stream cannot be re-read here; predict's check still applies
    sample = Subset(dataset, range(min(n_rows, len(dataset))))
    bad = total = 0
    for scores in net.outputs(sample):  # its loader draws from a throwaway generator: no stream moves
        finite = torch.isfinite(scores).all(dim=1)
        bad += int((~finite).sum())
        total += int(finite.shape[0])
    if bad:
        raise DivergedError(diverged_message(bad, total, getattr(net, "lr", None)))


#: Rows of a call's data whose loss is compared before and after continued training: a
#: bounded sample, so that the two extra forward passes cost the same for any batch size.
LOSS_ROWS = 256


def mean_loss(net: Any, dataset: Any, n_rows: int = LOSS_ROWS) -> float | None:
    """The net's mean training loss (evaluation mode, no gradients) over the first ``n_rows``
    rows of ``dataset``; ``None`` for a stream (it cannot be re-read) or no rows."""
    import torch
    from skorch.dataset import unpack_data
    from torch.utils.data import IterableDataset, Subset


    if isinstance(dataset, IterableDataset) or len(dataset) == 0:
        return None
    sample = Subset(dataset, range(min(n_rows, len(dataset))))
    total, count = 0.0, 0
    with torch.no_grad():  # the loader draws from a throwaway generator: no stream moves
        for batch in net.get_iterator(sample, training=False):
            rows = len(split_target(unpack_data(batch)[1])[0])
            total += float(net.validation_step(batch)["loss"]) * rows
            count += rows
    return total / count if count else None


def warn_if_worse(before: float | None, after: float | None, lr: Any) -> None:
    """Warn (:class:`~hiclass_parallel.exceptions.DivergenceWarning`) when continued training
    left the model much worse on its own rows: their mean loss ``after`` the call is both more
    than twice the loss ``before`` it and more than ``log 2`` nats above it (or not finite).

    Training on rows should lower their loss; a stochastic step may raise it a little (a high
    but workable ``lr``, Adam's first steps on new rows). Both conditions are asked so that
    neither kind of small change trips the warning: a nearly perfect model whose tiny loss
    doubles still predicts the same answers (the absolute rise is small), and a poor model's
    large loss rising by a nat is a bad step, not a diverged one (the relative rise is small).
    ``log 2`` nats per row is the model's probability of the labelled answers halved on average.
    """
    if before is None or after is None or not math.isfinite(before):
        return
    if math.isfinite(after) and (after <= 2 * before or after - before <= math.log(2)):
        return
    lr = f"{lr:.3g}" if isinstance(lr, (int, float)) else lr
    warnings.warn(
        f"this call made the model much worse on the rows it trained on: their mean loss rose from {before:.4g} "
        f"to {after:.4g} (lr={lr}). Training diverged: lower lr (e.g. by 10x) or scale X (e.g. StandardScaler); "
        "the model keeps the new weights",
        DivergenceWarning,
        stacklevel=6,  # the caller of fit / partial_fit
    )
