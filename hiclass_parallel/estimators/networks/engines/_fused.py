"""The fused training step: path-local training of the default text model in one native call.

Whether path-local training steps run fused
(:class:`~hiclass_parallel.estimators.networks._native_path_step.PathLocalStep`: forward, backward
and coalesced sparse gradients in C) or through torch (the module's ``encode``/``scorer``, the
criterion, autograd) is decided once per fit, by the configuration
(:func:`~hiclass_parallel.estimators.fitting._config.resolve_config` calls
:func:`fused_engine_refusal` and :func:`fused_update_plan_refusal`), and the net reads it. The
fused step serves exactly the model it was written for:

- the module is :class:`~hiclass_parallel.estimators.SparseMLP` itself (not a subclass), linear
  (``activation=None`` or ``nn.Identity``) or with ``activation=nn.ReLU`` (the kernel's ``relu``;
  the device step: linear only), without dropout or input dropout (with or without class text);
- the criterion is :class:`~hiclass_parallel.losses.PathLocalCrossEntropy` itself, ``"mean"``;
- the batch is a torch sparse CSR tensor, or a dense float32 ``(B, F)`` tensor (dense input:
  :func:`dense_csr` passes it to the kernel as CSR with every column of every row, so each
  input row's gradient is the dense one torch computes), the weights float32 on the CPU, all
  trainable;
- the C kernel was built and ``HICLASS_PARALLEL_NATIVE`` is not ``0``.

:func:`fused_step_refusal` checks one batch and the built module: it is the net's documented
fallback for what the configuration cannot see (a batch that is not CSR, weights made
non-trainable or of another dtype, a kernel missing where a saved model is loaded, a dense
batch of another dtype); the net
counts such batches (``TreeNet.step_fallbacks_``). Anything else trains through torch, which stays the reference the fused step is tested equal to
(``tests/estimators/networks/test_fused_step.py``). :func:`fused_step` writes the gradients into ``p.grad`` (sparse
COO, already coalesced, for the input and output rows) and leaves the update to the optimizer,
so skorch's loop, callbacks that read gradients, gradient clipping, learning-rate schedules and
data-parallel all-reduces see what they see on the torch route. The row gradients' values live
in the step's workspace until the next step (fresh buffers each step cost page faults as long
as the backward pass at WordNet's scale): a callback that keeps a gradient past its step copies
it, as it would torch's in-place accumulated ``.grad``.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ...ops.sibling_paths import sibling_plan
from . import _native_path_step as native
from ._optim import LazyAdam
from ._random import step_seed

__all__ = ["FusedPlan", "built_model_refusal", "dense_csr", "fused_engine_refusal", "fused_planner", "fused_step",
           "fused_step_refusal", "fused_update_plan_refusal", "fused_update_refusal", "kernel_model_refusal"]

#: One workspace per module (weakly held: it goes with the module).
_WORKSPACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def kernel_model_refusal(module: type, module_args: dict[str, Any], criterion: type,
                         criterion_args: dict[str, Any], relu: bool = False) -> str | None:
    """Why the model is not the one the path-local kernels (the fused C step, the device step)
    were written for, or ``None`` when it is: :class:`SparseMLP` itself, linear (``activation``
    ``None`` or ``nn.Identity``; with ``relu``, the caller's kernel takes ``nn.ReLU`` too, and
    no other activation), without dropout, trained with
    :class:`~hiclass_parallel.losses.PathLocalCrossEntropy` averaged (``"mean"``); read from the
    classes and their ``module__*`` / ``criterion__*`` arguments."""
    import inspect

    from ...losses import PathLocalCrossEntropy
    from ._modules import SparseMLP

    if module is not SparseMLP:
        return f"the module is {getattr(module, '__name__', module)}, not SparseMLP"
    defaults = {name: p.default for name, p in inspect.signature(SparseMLP.__init__).parameters.items()}
    args = {**defaults, **module_args}
    activations = (None, nn.Identity, nn.ReLU) if relu else (None, nn.Identity)
    if not any(args["activation"] is a for a in activations) or float(args["dropout"]) > 0 \
            or float(args["input_dropout"]) > 0:
        return "the module has an activation or dropout"
    reduction = criterion_args.get("reduction", "mean")
    if criterion is not PathLocalCrossEntropy or reduction != "mean":
        return f"the criterion is {criterion.__name__} (reduction {reduction!r})"
    return None


def fused_engine_refusal(module: type, module_args: dict[str, Any], criterion: type,
                         criterion_args: dict[str, Any], device: Any, sparse_input: bool | None) -> str | None:
    """Why the path-local steps of a fit cannot run fused, or ``None`` when they can: what the
    configuration knows before the net is built (the module class and its ``module__*``
    arguments, the criterion and its ``criterion__*`` ones, the device, whether ``X`` is sparse:
    ``None`` for a stream, whose batches the net checks). Dense ``X`` does not refuse: its
    batches reach the kernel through :func:`dense_csr`."""
    reason = kernel_model_refusal(module, module_args, criterion, criterion_args, relu=True)
    if reason:
        return reason
    if torch.device(device).type != "cpu":
        return f"the device is {device!r}, not the CPU"
    if not native.available():
        return "the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)"
    return None


def fused_update_plan_refusal(optimizer: type, callbacks: Any, net_class: type) -> str | None:
    """Why the fused step of a fit cannot also apply the optimizer's update of the input and
    output layers, or ``None`` when it can (the conditions of :func:`fused_update_refusal`, read
    from the classes before the net is built: ``callbacks`` are the user's, as given)."""
    from skorch import NeuralNet
    from skorch.callbacks import Callback

    if optimizer is not LazyAdam:
        return f"the optimizer is {optimizer.__name__}, not LazyAdam"
    if net_class.on_grad_computed is not NeuralNet.on_grad_computed:
        return f"{net_class.__name__} overrides on_grad_computed"
    for i, item in enumerate(callbacks or []):
        name, callback = item if isinstance(item, tuple) else (type(item).__name__, item)
        kind = callback if isinstance(callback, type) else type(callback)
        if kind.on_grad_computed is not Callback.on_grad_computed:
            return f"the callback {name!r} reads gradients (on_grad_computed)"
    return None


def built_model_refusal(module: nn.Module, criterion: nn.Module, relu: bool = False) -> str | None:
    """:func:`kernel_model_refusal` of a built module and criterion: why they are not the model
    the path-local kernels serve, or ``None`` (``relu``: an ``nn.ReLU`` activation is served too)."""
    from ...losses import PathLocalCrossEntropy
    from ._modules import SparseMLP

    if type(module) is not SparseMLP:
        return f"the module is {type(module).__name__}, not SparseMLP"
    activations = (nn.Identity, nn.ReLU) if relu else (nn.Identity,)
    if type(module.activation) not in activations or module.dropout.p > 0 or module.input_dropout.p > 0:
        return "the module has an activation or dropout"
    if type(criterion) is not PathLocalCrossEntropy or criterion.reduction != "mean":
        return f"the criterion is {type(criterion).__name__} (reduction {getattr(criterion, 'reduction', '?')!r})"
    return None


def fused_step_refusal(module: nn.Module, criterion: nn.Module, X: Any) -> str | None:
    """Why this path-local step cannot run fused, or ``None`` when it can: the net's check of
    each batch when the configuration chose the fused engine."""
    reason = built_model_refusal(module, criterion, relu=True)
    if reason:
        return reason
    if not isinstance(X, torch.Tensor) or X.device.type != "cpu" or not (
            X.layout == torch.sparse_csr or (X.layout == torch.strided and X.dim() == 2 and X.dtype == torch.float32)):
        return "the batch is neither a torch sparse CSR tensor nor a dense float32 matrix on the CPU"
    params = _params(module) + ((module.match_weight,) if module.head.has_text else ())
    if any(p.dtype != torch.float32 or p.device.type != "cpu" or not p.is_contiguous() or not p.requires_grad
           for p in params):
        return "the weights are not trainable float32 CPU tensors"
    if not native.available():
        return "the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)"
    return None


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
    planned workspace (:class:`~._native_path_step.StepPlan`)."""

    __slots__ = ("X", "csr", "sample", "step")

    def __init__(self, X: torch.Tensor, csr: torch.Tensor, sample: tuple[int, int, int] | None,
                 step: native.StepPlan):
        self.X, self.csr, self.sample, self.step = X, csr, sample, step

    def release(self) -> None:
        """Free the planned workspace (a plan no step ran)."""
        self.step.release()


def fused_planner(module: nn.Module, criterion: nn.Module,
                  softmax_sample: int | tuple[int, int] = 0) -> Callable[..., Callable[[], FusedPlan] | None]:
    """The planner of training batches for :class:`~._plan_ahead.PlanAhead`:
    ``planner(X, y, sample_weight=None)``, called on the training thread in the batches' order,
    returns ``None`` for a batch the fused step refuses, else the job that plans its step
    (:meth:`~._native_path_step.PathLocalStep.prepare`, on the planning thread) into a
    :class:`FusedPlan` for ``fused_step(..., plan=)``. The options are those of a training
    step (the level term on when ``level_contrast > 0``); the sampler's seed is drawn by the
    planner, where and as the step would draw it. Errors of a bad batch are raised by the job
    (the step then plans the batch again, and raises them itself)."""
    workspace = _workspace(module, criterion)
    stop_rows, level = criterion.semantics == "terminal", float(criterion.level_contrast) > 0

    def planner(X: torch.Tensor, y: torch.Tensor, sample_weight: torch.Tensor | None = None
                ) -> Callable[[], FusedPlan] | None:
        if fused_step_refusal(module, criterion, X) is not None:
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
    backward pass and the optimizer's step: see :func:`fused_update_refusal`), the input and
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


def fused_update_refusal(net: Any) -> str | None:
    """Why the fused step of ``net`` (a skorch net) cannot also apply the optimizer's update of
    the input and output layers, or ``None`` when it can: the net's one optimizer is
    :class:`LazyAdam` itself, and no callback (nor the net) hooks ``on_grad_computed``, the one
    place skorch lets code read or change gradients before the update (gradient clipping,
    gradient logging, the data-parallel all-reduce)."""
    from skorch import NeuralNet
    from skorch.callbacks import Callback

    if list(getattr(net, "_optimizers", ["optimizer"])) != ["optimizer"]:
        return "the net has more than one optimizer"
    if type(getattr(net, "optimizer_", None)) is not LazyAdam:
        return f"the optimizer is {type(getattr(net, 'optimizer_', None)).__name__}, not LazyAdam"
    if type(net).on_grad_computed is not NeuralNet.on_grad_computed:
        return f"{type(net).__name__} overrides on_grad_computed"
    for name, callback in getattr(net, "callbacks_", ()):
        if type(callback).on_grad_computed is not Callback.on_grad_computed:
            return f"the callback {name!r} reads gradients (on_grad_computed)"
    return None
