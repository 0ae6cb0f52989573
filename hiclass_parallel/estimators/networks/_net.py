"""The skorch net behind :class:`HierarchicalClassifier`, and the one inference loop.

:class:`TreeNet` is a plain skorch ``NeuralNet`` (the targets are node ids scored by the tree
loss, so ``NeuralNetClassifier``'s accuracy and stratified split do not apply) with four
additions: it checks the module's output width, its training steps and epochs are those of one
training engine (:mod:`~hiclass_parallel.estimators.networks.engines`: torch, the fused C step
or the device step; validation runs through torch, path-locally when asked),
:meth:`TreeNet.outputs` is the single loop over mini-batches that every prediction method uses,
and Ctrl-C during training propagates (skorch would end training quietly and keep the truncated
model).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import torch
from skorch import NeuralNet
from skorch.dataset import unpack_data
from skorch.utils import to_tensor
from torch.utils.data import DataLoader, IterableDataset

from ._data import split_target
from ._random import FitShuffle, loader_generator
from .engines import Engine, start, torch_step

__all__ = ["TreeNet", "module_kwargs"]


def _one_torch_thread_in_a_forked_child() -> None:
    """After ``os.fork``: torch on one thread in the child.

    torch's OpenMP threads do not survive a fork: a child whose parent ran torch on several
    threads hangs in its first parallel torch operation (``predict`` in a fork-start
    ``multiprocessing.Pool``, a forking web server). On one thread torch makes no parallel
    region, so the child works; it can raise the count again only if the parent never ran
    torch on several threads. Registered once, when the package's networks are imported.
    """
    if torch.get_num_threads() > 1:
        torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_one_torch_thread_in_a_forked_child)


def module_kwargs(module: type, kwargs: dict[str, Any], filled: dict[str, tuple[int, str]]) -> dict[str, Any]:
    """The module's ``__init__`` arguments: the user's ``module__*`` ones plus the sizes the data fixes.

    ``filled`` maps an argument name (``n_features``, ``n_outputs``) to its value and a phrase
    saying what that value counts; it is added when the module's ``__init__`` accepts it, and
    a user value that disagrees with it raises ``ValueError``.
    """
    kwargs = dict(kwargs)
    try:
        signature = inspect.signature(module.__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        signature = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
    for name, (value, what) in filled.items():
        if name in kwargs:
            if kwargs[name] != value:
                raise ValueError(
                    f"module__{name}={kwargs[name]!r} disagrees with the data: there are {value} {what}; "
                    f"leave module__{name} unset and the classifier fills it in"
                )
        elif name in signature or takes_any:
            kwargs[name] = value
    return kwargs


@contextlib.contextmanager
def _watching_ctrl_c() -> Iterator[list[int]]:
    """A list that gets an entry when SIGINT (Ctrl-C) reaches Python's handler inside, which
    then runs as before (by default it raises ``KeyboardInterrupt``). Outside the main thread,
    or with no Python handler (ignored, or the system's), nothing is watched: no Ctrl-C can
    raise there."""
    pressed: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield pressed
        return

    def handler(signum: int, frame: Any) -> Any:
        pressed.append(signum)
        return previous(signum, frame)

    signal.signal(signal.SIGINT, handler)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


class TreeNet(NeuralNet):
    """The skorch net: a plain ``NeuralNet`` that checks the module's output width, trains on
    one engine (``engine_``, set at the start of each training call) and lets Ctrl-C
    (``KeyboardInterrupt``) out of training instead of swallowing it.

    Parameters
    ----------
    n_scores : int
        The number of scores per sample the tree loss needs (classes plus stops).
    path_local : bool
        Train and validate path-locally: the module's ``encode`` gives the hidden
        representation and its ``scorer`` is handed to the criterion, which scores only the
        groups on each labelled path.
    step_engine : {"torch", "fused", "device"}
        The training engine, as the configuration chose it (``FitConfig.step_engine``).
    update_engine : {"optimizer", "fused", "device"}
        Whether the engine's step applies the big layers' update (``FitConfig.update_engine``).
    plan_ahead : bool
        The fused engine plans each next batch on a thread (``FitConfig.plan_ahead``).
    softmax_sample : int
        The fused step's sampled softmax: groups wider than this many columns train on this
        many sampled candidates (0: every softmax exact; ``FitConfig.softmax_sample``).
    """

    def __init__(self, *args: Any, n_scores: int | None = None, path_local: bool = False, step_engine: str = "torch",
                 update_engine: str = "optimizer", plan_ahead: bool = False, softmax_sample: int = 0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.n_scores = n_scores
        self.path_local = path_local
        self.step_engine = step_engine
        self.update_engine = update_engine
        self.plan_ahead = plan_ahead
        self.softmax_sample = softmax_sample

    def initialize_module(self) -> TreeNet:
        """skorch's, inside ``torch.device(self.device)`` on a GPU for a module that says it can be
        built there (``init_on_device``): drawing a text model's tables of hundreds of millions of
        weights on the host and copying them over costs a noticeable share of a GPU fit."""
        device = torch.device(self.device) if self.device is not None else None
        if device is not None and device.type == "cuda" and getattr(self.module, "init_on_device", False):
            with device:
                return super().initialize_module()
        return super().initialize_module()

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        """The engine of this training call (:func:`~.engines.start`): the one the configuration
        chose (``step_engine``), or torch when the built net refuses it. It reports what runs:
        ``step_engine_`` and ``update_engine_``; ``update_fallback_``, why the update is not
        the configuration's ``update_engine`` (``None``: it is); ``step_fallbacks_``, the
        training batches of this call the engine refused and ran through torch,
        ``step_fallback_reason_`` the last reason (or why the built net refused the engine);
        ``update_fallbacks_``, the fused steps whose update the optimizer could not hand over
        (:meth:`LazyAdam.fused_row_updates
        <hiclass_parallel.estimators.networks._optim.LazyAdam.fused_row_updates>`), applied by
        its own step instead; ``plan_ahead_``, whether each training batch's fused step is
        planned while the step before it runs."""
        super().on_train_begin(net, X=X, y=y, **kwargs)
        self.engine_: Engine = start(self)

    def run_single_epoch(self, iterator: Any, training: bool, prefix: str, step_fn: Any, **fit_params: Any) -> None:
        """skorch's epoch; a training epoch is the engine's (:meth:`~.engines.Engine.epoch`)."""
        if training and iterator is not None:
            return self.engine_.epoch(self, iterator, prefix, step_fn, **fit_params)
        return super().run_single_epoch(iterator, training, prefix, step_fn, **fit_params)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_fitting", None)
        return state

    def get_iterator(self, dataset: Any, training: bool = False) -> Any:
        """skorch's loader (as ``NeuralNet.get_iterator`` builds it), given a ``generator``
        unless the user gave one (``iterator_train__generator``, ``iterator_valid__generator``):
        the loaders of a seeded fit's training loop draw from the fit's own generator (the
        training loader shuffles with :class:`~._random.FitShuffle`), and any other loader gets
        a throwaway one, so no loader draws from torch's global generator
        (:func:`~._random.loader_generator`)."""
        kwargs = self.get_params_for("iterator_train" if training else "iterator_valid")
        iterator = self.iterator_train if training else self.iterator_valid
        kwargs.setdefault("batch_size", self.batch_size)
        if kwargs["batch_size"] == -1:
            kwargs["batch_size"] = len(dataset)
        if "generator" not in kwargs and isinstance(iterator, type) and issubclass(iterator, DataLoader):
            generator = loader_generator(self.__dict__.get("_fitting", False))
            if generator is not None:
                kwargs["generator"] = generator
                if kwargs.get("shuffle") and not ({"sampler", "batch_sampler"} & set(kwargs)) \
                        and not isinstance(dataset, IterableDataset):
                    kwargs["shuffle"], kwargs["sampler"] = False, FitShuffle(dataset, generator)
        return iterator(dataset, **kwargs)

    def fit_loop(self, X: Any, y: Any = None, epochs: int | None = None, **fit_params: Any) -> Any:
        self._fitting = True  # the loaders of the training loop draw from the fit's generator
        try:
            return super().fit_loop(X, y, epochs=epochs, **fit_params)
        except KeyboardInterrupt as interrupt:
            self._interrupt = interrupt  # skorch's partial_fit swallows it: partial_fit may raise it again
            raise
        finally:
            self.__dict__.pop("_fitting", None)

    def partial_fit(self, X: Any, y: Any = None, classes: Any = None, **fit_params: Any) -> TreeNet:
        """skorch's ``partial_fit``, except that Ctrl-C (``KeyboardInterrupt``) propagates.

        skorch catches ``KeyboardInterrupt`` in its loop, ends training and returns the net
        trained so far as if it had finished. That is how its callbacks stop training
        (``EarlyStopping`` raises it), and so it stays for them; but Ctrl-C is not a finished
        fit. While training, the SIGINT handler is watched (in the main thread, where Python
        runs it): an interrupt that follows a SIGINT is raised again after the callbacks'
        ``on_train_end`` (they release what they hold), and the classifier's fit puts the
        model back as it was before the call.
        """
        self.__dict__.pop("_interrupt", None)
        with _watching_ctrl_c() as pressed:
            super().partial_fit(X, y, classes, **fit_params)
        interrupt = self.__dict__.pop("_interrupt", None)
        if interrupt is not None and pressed:
            raise interrupt
        return self

    def get_loss(self, y_pred: Any, y_true: Any, X: Any = None, training: bool = False) -> torch.Tensor:
        """skorch's loss, with the batch's sample weights (a weighted batch's target is the
        pair ``(node ids, weights)``) handed to the criterion as ``sample_weight``."""
        ids, weight = split_target(y_true)
        if weight is None:
            return super().get_loss(y_pred, y_true, X=X, training=training)
        return self.criterion_(y_pred, to_tensor(ids, device=self.device),
                               sample_weight=to_tensor(weight, device=self.device))

    def train_step_single(self, batch: Any, **fit_params: Any) -> dict[str, Any]:
        """The engine's step (:meth:`~.engines.Engine.step`)."""
        return self.engine_.step(self, batch, **fit_params)

    def validation_step(self, batch: Any, **fit_params: Any) -> dict[str, Any]:
        """Through torch, whatever the engine (:func:`~.engines.torch_step`)."""
        return torch_step(self, batch, training=False, **fit_params)

    def infer(self, x: Any, **fit_params: Any) -> torch.Tensor:
        scores = super().infer(x, **fit_params)
        if not isinstance(scores, torch.Tensor) or scores.ndim != 2 or scores.shape[1] != self.n_scores:
            shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
            raise ValueError(
                f"the module {type(self.module_).__name__} returned scores of shape {shape}, but the tree "
                f"needs {self.n_scores} scores per sample (n_samples, {self.n_scores}): the tree and the "
                "module disagree in size"
            )
        return scores

    def outputs(self, dataset: Any, hidden: bool = False, batch_size: int | None = None) -> Iterator[torch.Tensor]:
        """The inference loop: the module's scores per mini-batch, in evaluation mode, no gradients.

        ``hidden=True`` yields the module's hidden representation (``encode``) instead, for
        best-first decoding, which scores only the groups it expands. ``batch_size`` (``None``:
        the net's) sizes the mini-batches of this loop only.
        """
        self._set_training(False)
        with torch.no_grad():
            for batch in self._inference_loader(dataset, batch_size):
                if not hidden:
                    yield self.evaluation_step(batch, training=False)  # skorch's step, so its hooks apply
                    continue
                Xi, _ = unpack_data(batch)
                yield self.module_.encode(to_tensor(Xi, device=self.device))

    def _inference_loader(self, dataset: Any, batch_size: int | None) -> Any:
        """skorch's validation loader, its batch size ``batch_size`` (the net's when ``None``)."""
        if batch_size is None or batch_size == self.batch_size:
            return self.get_iterator(dataset, training=False)
        # skorch's get_iterator reads the size from the net; the loader keeps it once built, so
        # the net's own size (what training continues with) is put back at once.
        before, self.batch_size = self.batch_size, batch_size
        try:
            return self.get_iterator(dataset, training=False)
        finally:
            self.batch_size = before
