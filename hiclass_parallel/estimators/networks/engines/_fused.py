"""The fused engine: path-local training of the default text model in one native call per step.

A step (:func:`fused_step`) runs forward, backward and the coalesced sparse gradients in C
(:class:`~hiclass_parallel.estimators.networks._native_path_step.PathLocalStep`, the kernel
``_path_step.c`` beside it, which LazyAdam's row update shares); with the fused update, LazyAdam's
update of the big layers' touched rows too. :class:`FusedEngine` is the engine
(:mod:`~hiclass_parallel.estimators.networks.engines`): its :meth:`~FusedEngine.refusal` is what
the configuration asks before the net is built, :meth:`~FusedEngine.batch_refusal` what each
training batch is checked for. The fused step serves exactly the model it was written for:

- the module is :class:`~hiclass_parallel.estimators.SparseMLP` itself (not a subclass), linear
  (``activation=None`` or ``nn.Identity``) or with ``activation=nn.ReLU`` (the kernel's ``relu``;
  the device step: linear only), without dropout or input dropout (with or without class text);
- the criterion is :class:`~hiclass_parallel.losses.PathLocalCrossEntropy` itself, ``"mean"``;
- the batch is a torch sparse CSR tensor, or a dense float32 ``(B, F)`` tensor (dense input:
  :func:`dense_csr` passes it to the kernel as CSR with every column of every row, so each
  input row's gradient is the dense one torch computes), the weights float32 on the CPU, all
  trainable;
- the C kernel was built and ``HICLASS_PARALLEL_NATIVE`` is not ``0``.

:meth:`FusedEngine.batch_refusal` checks one batch and the built module: it is the engine's
documented fallback for what the configuration cannot see (a batch that is not CSR, weights made
non-trainable or of another dtype, a kernel missing where a saved model is loaded, a dense
batch of another dtype); such a batch runs through torch
(:func:`~hiclass_parallel.estimators.networks.engines._torch.torch_step`) and is counted
(``TreeNet.step_fallbacks_``). Torch stays the reference the fused step is tested equal to
(``tests/estimators/networks/engines/test_fused_step.py``). :func:`fused_step` writes the
gradients into ``p.grad`` (sparse COO, already coalesced, for the input and output rows) and
leaves the update to the optimizer, so skorch's loop, callbacks that read gradients, gradient
clipping, learning-rate schedules and data-parallel all-reduces see what they see on the torch
route. The row gradients' values live in the step's workspace until the next step (fresh
buffers each step cost page faults as long as the backward pass at WordNet's scale): a callback
that keeps a gradient past its step copies it, as it would torch's in-place accumulated
``.grad``.

With ``plan_ahead_`` (the configuration's ``plan_ahead``), an epoch's training batches come
through a :class:`~hiclass_parallel.estimators.networks._plan_ahead.PlanAhead`, which plans each
next batch's step on a thread while the step before it runs (the same batches, the same weights
bit for bit); the thread ends with the epoch, however the epoch ends.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch
from skorch import NeuralNet
from skorch.dataset import unpack_data
from skorch.utils import to_tensor
from torch import nn

from ....ops.sibling_paths import sibling_plan
from .. import _native_path_step as native
from .._data import split_target
from .._optim import LazyAdam
from .._plan_ahead import PlanAhead
from .._random import step_seed
from ._kernel_model import built_model_refusal, model_refusal, net_update_refusal, update_refusal
from ._protocol import FULL_TRAINING, Engine, EngineChoice, EngineRequest, report
from ._torch import torch_step

__all__ = ["FusedEngine", "FusedPlan", "dense_csr", "fused_planner", "fused_step"]

#: One workspace per module (weakly held: it goes with the module).
_WORKSPACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _params(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``W_in (F, H)``, ``b_in (H)``, ``W_out (N, H)``, ``b_out (N, 1)`` of a SparseMLP."""
    return (module.input.embedding.weight, module.input.bias, module.head.weight.weight, module.head.bias.weight)


def _workspace(module: nn.Module, criterion: nn.Module) -> native.PathLocalStep:
    plan = sibling_plan(criterion.tree, criterion.stop)
    step = _WORKSPACES.get(module)
    if step is None or step.plan is not plan or step.n_features != module.n_features:
        step = _WORKSPACES[module] = native.PathLocalStep(plan, module.n_features)
    return step


@functools.lru_cache(maxsize=4)
def _dense_index(B: int, F: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row pointers and column indices of a ``(B, F)`` batch listing every column of every row.
    A fit's batches share their shape (all but the last), so each shape's index is built once,
    not every step; the kernel only reads it."""
    crow = torch.arange(0, B * F + 1, F, dtype=torch.int64) if F else torch.zeros(B + 1, dtype=torch.int64)
    return crow, torch.arange(F, dtype=torch.int64).repeat(B)


def dense_csr(X: torch.Tensor) -> torch.Tensor:
    """A dense ``(B, F)`` float32 batch as a torch sparse CSR tensor that lists every column of
    every row, zeros included: the kernel then reads and writes every input row, as torch's
    dense product does (dropping the zeros would leave the rows of a feature that is zero in the
    whole batch without the gradient, zero, and so without the optimizer's update, that the
    torch route gives them). The values are the batch's own memory when it is contiguous."""
    import warnings

    B, F = (int(n) for n in X.shape)
    crow, col = _dense_index(B, F)
    with warnings.catch_warnings():  # torch flags sparse CSR as beta; the kernel reads only its parts
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, X.detach().reshape(-1), size=(B, F), check_invariants=False)


def _draw_sample(workspace: native.PathLocalStep, softmax_sample: int | tuple[int, int]) -> tuple[int, int, int] | None:
    """``(above, size, seed)`` of a step's sampled softmax, or ``None`` when no group of the
    plan is wider than ``above`` (no seed is drawn: the generator is left as it is). The seed
    comes from the seeded fit's own generator (``_random``), else torch's global one."""
    above, size = (softmax_sample, softmax_sample) if isinstance(softmax_sample, int) else softmax_sample
    if above <= 0 or workspace.widest_group <= above:
        return None
    return int(above), int(size), step_seed()


def _accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    # skorch zeroes gradients (to None) before each step; a callback that accumulates over
    # batches finds them set and gets the sum, as with autograd.
    param.grad = grad if param.grad is None else param.grad + grad


def _rows_grad(param: torch.Tensor, rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return torch.sparse_coo_tensor(rows.unsqueeze(0), values.reshape(-1, *param.shape[1:]), param.shape,
                                   is_coalesced=True, check_invariants=False)


class FusedPlan:
    """A training batch's fused step planned ahead (:func:`fused_planner`): the batch ``X`` as
    the net hands it to the step, the CSR batch the kernel reads, the sampler setting, and the
    planned workspace (:class:`~hiclass_parallel.estimators.networks._native_path_step.StepPlan`)."""

    __slots__ = ("X", "csr", "sample", "step")

    def __init__(self, X: torch.Tensor, csr: torch.Tensor, sample: tuple[int, int, int] | None,
                 step: native.StepPlan):
        self.X, self.csr, self.sample, self.step = X, csr, sample, step

    def release(self) -> None:
        """Free the planned workspace (a plan no step ran)."""
        self.step.release()


def fused_planner(module: nn.Module, criterion: nn.Module,
                  softmax_sample: int | tuple[int, int] = 0) -> Callable[..., Callable[[], FusedPlan] | None]:
    """The planner of training batches for :class:`~hiclass_parallel.estimators.networks._plan_ahead.PlanAhead`:
    ``planner(X, y, sample_weight=None)``, called on the training thread in the batches' order,
    returns ``None`` for a batch the fused step refuses, else the job that plans its step
    (:meth:`~hiclass_parallel.estimators.networks._native_path_step.PathLocalStep.prepare`, on the planning thread) into a
    :class:`FusedPlan` for ``fused_step(..., plan=)``. The options are those of a training
    step (the level term on when ``level_contrast > 0``); the sampler's seed is drawn by the
    planner, where and as the step would draw it. Errors of a bad batch are raised by the job
    (the step then plans the batch again, and raises them itself)."""
    workspace = _workspace(module, criterion)
    stop_rows, level = criterion.semantics == "terminal", float(criterion.level_contrast) > 0

    def planner(X: torch.Tensor, y: torch.Tensor, sample_weight: torch.Tensor | None = None
                ) -> Callable[[], FusedPlan] | None:
        if FusedEngine.batch_refusal(module, criterion, X) is not None:
            return None
        sample = _draw_sample(workspace, softmax_sample)

        def job() -> FusedPlan:
            csr = dense_csr(X) if X.layout == torch.strided else X
            step = workspace.prepare(csr, y, stop_rows=stop_rows, level=level, sample_weight=sample_weight,
                                     sample=sample)
            return FusedPlan(X, csr, sample, step)
        return job
    return planner


def fused_step(module: nn.Module, criterion: nn.Module, X: torch.Tensor, y: torch.Tensor,
               optimizer: LazyAdam | None = None, sample_weight: torch.Tensor | None = None,
               softmax_sample: int | tuple[int, int] = 0, plan: FusedPlan | None = None) -> dict[str, Any]:
    """One training step's loss and gradients (in ``p.grad``): ``{"loss", "y_pred"}`` as skorch's
    ``train_step_single`` returns (``y_pred`` is the hidden representation), and
    ``"fused_update"``, whether the step also applied the update of the big layers.

    With ``optimizer`` (the net's ``LazyAdam``, when nothing reads the gradients between the
    backward pass and the optimizer's step: see
    :func:`~._kernel_model.update_refusal`), the input and
    output layers' touched rows are updated in the step itself, each as soon as its gradient is
    complete, and their ``.grad`` stays unset; the biases get gradients, which the optimizer's
    ``step`` then applies. The weights come out as after the unfused step and ``step``.

    ``sample_weight`` (``(B,)``, ``None``: all 1) weighs each sample's loss rows as
    ``criterion(..., sample_weight=...)`` does on the torch route.

    ``softmax_sample`` (0: every softmax exact): groups wider than this many columns train on a
    sampled softmax of this many candidates (a pair ``(above, size)``: groups wider than
    ``above`` on ``size``), shared by the batch (``PathLocalStep``'s ``sample``); the sampler is
    seeded from the fit's generator (torch's global one in an unseeded fit), one draw per step
    that samples, so ``random_state`` reproduces a fit.

    ``plan``: this batch's step planned ahead (:func:`fused_planner`; its sampler seed drawn
    when it was planned); a plan of another batch is released and the step plans itself."""
    planned = plan if plan is not None and plan.X is X else None
    if plan is not None and planned is None:
        plan.release()
    if planned is not None:
        X = planned.csr
    elif X.layout == torch.strided:
        X = dense_csr(X)
    W_in, b_in, W_out, b_out = _params(module)
    level = criterion.level_contrast if criterion.training else 0.0
    update = optimizer.fused_row_updates(W_in, W_out) if optimizer is not None else None
    text = None
    if module.head.has_text:
        head = module.head
        text = native.ClassText(module.vocabulary_position, head.text_ptr, head.text_idx, head.text_val,
                                module.class_feature_scale * module.match_weight.detach())
    workspace = _workspace(module, criterion)
    sample = planned.sample if planned is not None else _draw_sample(workspace, softmax_sample)
    out = workspace(
        X, y, W_in.detach(), b_in.detach(), W_out.detach(), b_out.detach().reshape(-1),
        stop_rows=criterion.semantics == "terminal", level_weight=level, threads=torch.get_num_threads(),
        update=tuple(update) if update else None, text=text, sample_weight=sample_weight, sample=sample,
        plan=planned.step if planned is not None else None, relu=type(module.activation) is nn.ReLU,
    )
    if text is not None:  # the kernel's gradient is of the scaled weights
        _accumulate(module.match_weight, module.class_feature_scale * out.text_grad)
    if not update:
        _accumulate(W_in, _rows_grad(W_in, out.input_rows, out.input_grad))
        _accumulate(W_out, _rows_grad(W_out, out.output_rows, out.output_grad))
    _accumulate(b_in, out.input_bias_grad)
    _accumulate(b_out, _rows_grad(b_out, out.output_rows, out.output_bias_grad))
    return {"loss": torch.tensor(out.loss, dtype=torch.float32), "y_pred": out.hidden, "fused_update": bool(update)}


class FusedEngine(Engine):
    """The fused C step of the default text model on the CPU (see the module's docstring).

    Examples
    --------
    >>> from hiclass_parallel.estimators import LazyAdam, SparseMLP
    >>> from hiclass_parallel.losses import PathLocalCrossEntropy
    >>> from hiclass_parallel.estimators.networks.engines import EngineRequest
    >>> request = EngineRequest(True, SparseMLP, {}, PathLocalCrossEntropy, {}, LazyAdam, "cuda", True)
    >>> FusedEngine.refusal(request)
    "the device is 'cuda', not the CPU"
    """

    name = "fused"
    #: The epoch's batches, each next one planned on a thread (while an epoch plans ahead).
    _plans: PlanAhead | None = None

    @classmethod
    def refusal(cls, request: EngineRequest) -> str | None:
        """Why the path-local steps of a fit cannot run fused, read before the net is built.
        Dense ``X`` does not refuse: its batches reach the kernel through :func:`dense_csr`; a
        stream's batches (``sparse_input=None``) are checked one by one (:meth:`batch_refusal`)."""
        if not request.path_local:
            return FULL_TRAINING
        reason = model_refusal(request.module, request.module_args, request.criterion, request.criterion_args,
                               relu=True)
        if reason:
            return reason
        if torch.device(request.device).type != "cpu":
            return f"the device is {request.device!r}, not the CPU"
        if not native.available():
            return "the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)"
        return None

    @classmethod
    def choice(cls, request: EngineRequest, refusals: dict[str, str]) -> EngineChoice:
        """The fused step, and its update of the big layers unless the optimizer or a gradient
        reader refuses it (:func:`~._kernel_model.update_refusal`)."""
        why = {True: "the linear model (SparseMLP) on CPU sparse batches",
               False: "the linear model (SparseMLP) on CPU dense batches, each reaching the kernel as CSR with "
                      "every column",
               None: "the linear model (SparseMLP) on CPU batches, sparse or dense"}[request.sparse_input]
        update = update_refusal(request.optimizer, request.net_class, request.named_callbacks())
        if update is not None:
            return EngineChoice("fused", why, "optimizer", update)
        return EngineChoice("fused", why, "fused", "LazyAdam, no gradient readers")

    @staticmethod
    def batch_refusal(module: nn.Module, criterion: nn.Module, X: Any) -> str | None:
        """Why this path-local training batch cannot run fused, or ``None`` when it can: the
        built model (:func:`~._kernel_model.built_model_refusal`), the batch ``X`` (a tensor as
        the step gets it) and the weights."""
        reason = built_model_refusal(module, criterion, relu=True)
        if reason:
            return reason
        if not isinstance(X, torch.Tensor) or X.device.type != "cpu" or not (
                X.layout == torch.sparse_csr
                or (X.layout == torch.strided and X.dim() == 2 and X.dtype == torch.float32)):
            return "the batch is neither a torch sparse CSR tensor nor a dense float32 matrix on the CPU"
        params = _params(module) + ((module.match_weight,) if module.head.has_text else ())
        if any(p.dtype != torch.float32 or p.device.type != "cpu" or not p.is_contiguous() or not p.requires_grad
               for p in params):
            return "the weights are not trainable float32 CPU tensors"
        if not native.available():
            return "the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)"
        return None

    def begin(self, net: Any) -> str | None:
        """The fused step, whatever the built net: the update falls back to the optimizer's
        step when a gradient reader was added since the configuration was resolved
        (``update_fallback_`` says why); each epoch plans ahead when ``net.plan_ahead``."""
        fallback = net_update_refusal(net) if net.update_engine == "fused" else None
        update = "fused" if net.update_engine == "fused" and fallback is None else "optimizer"
        report(net, self.name, update, plan_ahead=net.plan_ahead, update_fallback=fallback)
        return None

    def step(self, net: Any, batch: Any, **fit_params: Any) -> dict[str, Any]:
        """The fused step of ``batch`` (its plan made ahead when the epoch plans ahead), or, for a
        batch :meth:`batch_refusal` refuses, the torch step, counted in ``step_fallbacks_``
        (the last reason in ``step_fallback_reason_``); a fused step whose update the optimizer
        could not hand over is counted in ``update_fallbacks_``."""
        net._set_training(True)
        Xi, yi = unpack_data(batch)
        X, y = to_tensor(Xi, device=net.device), to_tensor(yi, device=net.device)
        refusal = self.batch_refusal(net.module_, net.criterion_, X)
        if refusal is not None:
            net.step_fallbacks_ += 1
            net.step_fallback_reason_ = refusal
            return torch_step(net, batch, training=True)
        y, weight = split_target(y)
        weighted = {} if weight is None else {"sample_weight": weight}
        fuse_update = net.update_engine_ == "fused"
        plan = self._plans.plan_for(batch) if self._plans is not None else None
        step = fused_step(net.module_, net.criterion_, X, y, net.optimizer_ if fuse_update else None, plan=plan,
                          **weighted, **self._options(net))
        if fuse_update and not step["fused_update"]:
            net.update_fallbacks_ += 1
        return step

    def epoch(self, net: Any, iterator: Any, prefix: str, step_fn: Any, **fit_params: Any) -> None:
        """skorch's epoch; with ``net.plan_ahead_``, over a :class:`PlanAhead` of the batches."""
        if not net.plan_ahead_:
            return super().epoch(net, iterator, prefix, step_fn, **fit_params)
        plan = fused_planner(net.module_, net.criterion_, **self._options(net))

        def planner(batch: Any) -> Any:  # on the training thread, one batch ahead of the step
            Xi, yi = unpack_data(batch)
            ids, weight = split_target(to_tensor(yi, device=net.device))
            return plan(to_tensor(Xi, device=net.device), ids, weight)

        with PlanAhead(iterator, planner) as ahead:
            self._plans = ahead
            try:
                return NeuralNet.run_single_epoch(net, ahead, True, prefix, step_fn, **fit_params)
            finally:
                self._plans = None

    @staticmethod
    def _options(net: Any) -> dict[str, Any]:
        """The step's options besides the batch (the same for a step and its plan): the sampled
        softmax of wide groups (``net.softmax_sample``, as the configuration chose it)."""
        return {"softmax_sample": int(net.softmax_sample)}
