"""The device-resident training step: forward, backward and the row update as Triton kernels.

:class:`DeviceStep` trains the default text model (:class:`~hiclass_parallel.estimators.SparseMLP`,
linear, no dropout; with or without class text) with
:class:`~hiclass_parallel.losses.PathLocalCrossEntropy` (``"mean"``, with its in-batch level term)
and :class:`~hiclass_parallel.estimators.LazyAdam`, reading a :class:`~._plan.StepPlan` already
on the device. A step is a few kernels and fixed-shape fills (:mod:`._kernels`; with class text,
a few fixed-shape torch operations for the words and the match weights' gradient): no shape
depends on the data and nothing is read back,
so it never waits for the device; on CUDA a step of a plan shape seen before can replay as one
CUDA graph (:meth:`DeviceStep.step` with ``graph=True``; off by default: its speed is not yet
measured in a fit).

What the torch route checks per step, this one checks otherwise: the labels and the sample
weights on the host, by the planner (where they already are); a non-finite loss sets a flag on
the device, after which no update is applied; :meth:`DeviceStep.read` reads the flag and the
loss accumulated since the last read (one synchronisation: once per epoch, or every N steps).
The optimizer's moments are its own state tensors (updated in place); its step counts live on
the device while training and are written back by :meth:`DeviceStep.read`.

Tested under Triton's interpreter (``TRITON_INTERPRET=1``) on the CPU against the torch route;
on a GPU it has not been measured yet (``docs/gpu.md``).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch
from torch import nn

from .....ops.sibling_paths import sibling_plan
from ..._optim import LazyAdam
from ..._random import step_seed
from .._kernel_model import built_model_refusal
from ._plan import StepPlan, StepPlanner

__all__ = ["DeviceStep", "device_step_refusal", "triton_available"]

_BLOCK_K = 16
_BLOCK_R = 16  # rows per program of the row update
_BLOCK_E = 16  # input entries per tile


def triton_cdiv(n: int, d: int) -> int:
    """``ceil(n / d)``: the programs of a grid over ``n`` items, ``d`` per program."""
    return -(-n // d)


def triton_available() -> bool:
    """Whether Triton is importable and not turned off (``HICLASS_PARALLEL_TRITON=0``)."""
    return os.environ.get("HICLASS_PARALLEL_TRITON", "1") != "0" and importlib.util.find_spec("triton") is not None


def _kernels() -> Any:
    from . import _kernels  # imports Triton: only when a step runs

    return _kernels


def device_step_refusal(module: nn.Module, criterion: nn.Module, optimizer: Any) -> str | None:
    """Why :class:`DeviceStep` cannot train this built module, criterion and optimizer, or ``None``
    (what :meth:`~._engine.DeviceEngine.begin` checks)."""
    reason = built_model_refusal(module, criterion)
    if reason:
        return reason
    if type(optimizer) is not LazyAdam:
        return f"the optimizer is {type(optimizer).__name__}, not LazyAdam"
    params = _params(module) + ((module.match_weight,) if module.head.has_text else ())
    if any(p.dtype != torch.float32 or not p.is_contiguous() or not p.requires_grad for p in params):
        return "the weights are not trainable, contiguous float32 tensors"
    # (a model trained on a GPU and continued on the CPU: Triton's interpreter alone runs on the CPU)
    if any(p.device.type != "cuda" for p in params) and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return "the weights are not on a CUDA device"
    if not triton_available():
        return "Triton is not installed (or HICLASS_PARALLEL_TRITON=0)"
    return None


def _params(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``W_in (F, H)``, ``b_in (H)``, ``W_out (N, H)``, ``b_out (N, 1)`` of a SparseMLP."""
    return (module.input.embedding.weight, module.input.bias, module.head.weight.weight, module.head.bias.weight)


class DeviceStep:
    """Training steps of one SparseMLP, criterion and LazyAdam on the parameters' device.

    Parameters
    ----------
    module : SparseMLP
    criterion : PathLocalCrossEntropy
    optimizer : LazyAdam
        Holds the parameters (its state gives the moments' forms: a per-row second moment, a
        bfloat16 first moment, as its groups ask).
    batch_rows : int, default=None
        Passed to :attr:`planner`: every batch padded to this many rows.
    softmax_sample : int or (int, int), default=0
        Passed to :attr:`planner` (``sample``): groups wider than this train on a sampled
        softmax in the batches planned with a seed (:meth:`draw_seed`); 0: every softmax exact.

    Attributes
    ----------
    planner : StepPlanner
        The host planner of this step's batches (a plain callable; run it in a loader worker).
    """

    def __init__(self, module: nn.Module, criterion: nn.Module, optimizer: Any, batch_rows: int | None = None,
                 softmax_sample: int | tuple[int, int] = 0):
        refusal = device_step_refusal(module, criterion, optimizer)
        if refusal is not None:
            raise ValueError(f"the device step cannot train this model: {refusal}")
        self.module, self.criterion, self.optimizer = module, criterion, optimizer
        self.text = module.head.has_text
        self.params = _params(module) + ((module.match_weight,) if self.text else ())
        self.device = self.params[0].device
        level = criterion.level_contrast if criterion.training else 0.0
        text = None
        if self.text:
            head = module.head
            text = (module.vocabulary_position, head.text_ptr, head.text_idx, head.text_val)
            self.scale = float(module.class_feature_scale)
            self.vocabulary_ids = torch.arange(module.match_weight.shape[0], dtype=torch.int32, device=self.device)
        self.planner = StepPlanner(sibling_plan(criterion.tree, criterion.stop), criterion.semantics == "terminal",
                                   level, batch_rows=batch_rows, text=text, sample=softmax_sample)
        self.H = self.params[0].shape[1]
        self.block_h = max(16, 1 << (self.H - 1).bit_length())
        # per parameter: (group, state) and its numbers on the device (lr, b1, b2, eps, wd, step)
        self._states = []
        rows = []
        for i, p in enumerate(self.params):
            group = next(g for g in optimizer.param_groups if any(q is p for q in g["params"]))
            dense = i == 1 or i == 4  # b_in and the match weights get dense gradients: Adam per entry
            state = optimizer._state(p, {**group, "second_moment": "entry"} if dense else group)
            self._states.append((group, state))
            b1, b2 = group["betas"]
            rows.append([group["lr"] * group.get("lr_scale", 1.0), b1, b2, group["eps"], group["weight_decay"],
                         float(state["step"])])
        self.hyper = torch.tensor(rows, dtype=torch.float64, device=self.device)
        self._lrs = [r[0] for r in rows]
        self.loss_sum = torch.zeros(2, dtype=torch.float32, device=self.device)  # sum of n * loss, sum of n
        self.flag = torch.zeros(1, dtype=torch.int32, device=self.device)
        self._buffers: dict[tuple, dict[str, torch.Tensor]] = {}
        self._graphs: dict[tuple, Any] = {}
        self.steps = 0
        self.planned_ahead = 0  # steps whose plan was made ahead, on a planning thread

    # ------------------------------------------------------------------ buffers
    def draw_seed(self) -> int | None:
        """The seed of the next batch's sampled softmax, drawn from the seeded fit's own
        generator (else torch's global one) on the training thread, in the batches' order;
        ``None`` when no group is wider than the limit (nothing is drawn)."""
        if not self.planner.samples:
            return None
        return step_seed()

    def _work(self, plan: StepPlan) -> dict[str, torch.Tensor]:
        """The step's work buffers for a plan shape, allocated once (fixed addresses: a CUDA graph
        captured on them replays for every plan of that shape)."""
        work = self._buffers.get(plan.key)
        if work is None:
            H, dev = self.H, self.device
            B = plan["row_ptr"].shape[0] - 1
            work = self._buffers[plan.key] = {
                "h": torch.zeros(B, H, device=dev), "dh": torch.zeros(B, H, device=dev),
                "g_out": torch.zeros(plan["out_rows"].shape[0], H, device=dev),
                "g_bout": torch.zeros(plan["out_rows"].shape[0], device=dev),
                "g_in": torch.zeros(plan["in_rows"].shape[0], H, device=dev),
                "g_bin": torch.zeros(H, device=dev),
                "loss": torch.zeros(1, device=dev),
                "bias_row": torch.zeros(1, dtype=torch.int32, device=dev),
            }
            if self.text:
                P = plan["present"].shape[0]
                work.update({"raw": torch.zeros(B, P, device=dev), "g_words": torch.zeros(B, P, device=dev),
                             "g_match": torch.zeros(self.params[4].shape[0], device=dev)})
        return work

    # ------------------------------------------------------------------ the step
    def forward_backward(self, plan: StepPlan) -> dict[str, torch.Tensor]:
        """The loss (``work["loss"]``, a device tensor) and every gradient of one plan, in the
        work buffers: ``g_in (UF, H)`` and ``g_out (U, H)``, ``g_bout (U,)`` by distinct row of the
        plan, ``g_bin (H,)``; ``h`` the hidden rows. Nothing is read back."""
        k = _kernels()
        W_in, b_in, W_out, b_out = (p.detach() for p in self.params[:4])
        work = self._work(plan)
        for name in ("dh", "g_out", "g_bout", "g_in", "g_bin", "loss") + (("raw", "g_words") if self.text else ()):
            work[name].zero_()
        text = self._words(plan, work) if self.text else (work["h"], work["h"], 0, plan["row_ptr"],
                                                                       plan["row_ptr"], work["h"])
        B, H, BH = work["h"].shape[0], self.H, self.block_h
        k.hidden[(B,)](plan["row_ptr"], plan["entry_pos"], plan["entry_value"], plan["in_rows"], W_in,
                       W_in.stride(0), b_in, work["h"], H, BLOCK_E=_BLOCK_E, BLOCK_H=BH)
        for block in ("sib", "lvl"):
            R = plan[f"{block}_sample"].shape[0]
            if R == 0:
                continue
            k.softmax_rows[(R,)](plan[f"{block}_sample"], plan[f"{block}_slot"], plan[f"{block}_target"],
                                 plan[f"{block}_weight"], plan[f"{block}_table_ptr"], plan[f"{block}_table"],
                                 plan[f"{block}_offset"], plan["out_rows"],
                                 work["h"], W_out, W_out.stride(0), b_out, b_out.stride(0),
                                 work["dh"], work["g_out"], work["g_bout"], work["loss"], self.flag, H,
                                 *text, TEXT=self.text, BLOCK_K=_BLOCK_K, BLOCK_H=BH)
        k.input_grad[(B,)](plan["row_ptr"], plan["entry_pos"], plan["entry_value"], work["dh"], work["g_in"],
                           work["g_bin"], H, BLOCK_E=_BLOCK_E, BLOCK_H=BH)
        if self.text:  # the match weights' gradient: scale * sum_b g_words[b, p] * x[b, p], by vocabulary id
            g = (work["g_words"] * work["raw"]).sum(0).mul_(self.scale)
            work["g_match"].zero_().index_add_(0, plan["present"], g)
        return work

    def _words(self, plan: StepPlan, work: dict[str, torch.Tensor]) -> tuple[Any, ...]:
        """The class-text match's operands of the kernel: the batch's input on its class
        vocabulary (``raw``, summed per (row, word); the last column gathers the other entries),
        times the scaled match weights (``words``); fixed-shape torch operations."""
        raw = work["raw"]
        P = raw.shape[1]
        raw.view(-1).index_add_(0, plan["entry_row"] * P + plan["entry_word"], plan["entry_value"])
        words = raw * (self.scale * self.params[4].detach()).index_select(0, plan["present"])
        work["words"] = words
        return words, work["g_words"], P, plan["text_ptr"], plan["text_word"], plan["text_value"]

    def update(self, plan: StepPlan, work: dict[str, torch.Tensor]) -> None:
        """LazyAdam's update of the plan's touched rows (and of ``b_in``), from the work buffers."""
        k = _kernels()
        for i, (group, _) in enumerate(self._states):
            lr = group["lr"] * group.get("lr_scale", 1.0)
            if lr != self._lrs[i]:  # a schedule changed it: a fill, no read back
                self.hyper[i, 0].fill_(lr)
                self._lrs[i] = lr
        self.hyper[:, 5] += 1
        W_in, b_in, W_out, b_out = (p.detach() for p in self.params[:4])
        H, BH = self.H, self.block_h
        jobs = ((0, plan["in_rows"], work["g_in"], W_in, H),
                (1, work["bias_row"], work["g_bin"], b_in.view(1, H), H),
                (2, plan["out_rows"], work["g_out"], W_out, H),
                (3, plan["out_rows"], work["g_bout"], b_out, 1))
        if self.text:  # dense Adam of every match weight, one entry per row
            jobs += ((4, self.vocabulary_ids, work["g_match"], self.params[4].detach().view(-1, 1), 1),)
        for i, ids, grad, p, width in jobs:
            state = self._states[i][1]
            m, v = state["exp_avg"].view(p.shape), state["exp_avg_sq"]
            row_v = v.numel() != p.numel()
            v = v.view(p.shape[0], -1)
            n = ids.shape[0]
            k.adam_rows[(triton_cdiv(n, _BLOCK_R),)](ids, n, grad, p, p.stride(0), m, m.stride(0), v, v.stride(0),
                                                   self.hyper[i], self.flag, width, ROW_V=row_v,
                                                   M_BF16=m.dtype == torch.bfloat16, BLOCK_R=_BLOCK_R,
                                                   BLOCK_H=BH if width > 1 else 16)
        self.steps += 1

    def _run(self, plan: StepPlan) -> torch.Tensor:
        work = self.forward_backward(plan)
        self.update(plan, work)
        # the epoch's accumulator: the loss times the batch's rows, as skorch averages batch losses
        n = plan["n_samples"]
        self.loss_sum.add_(torch.cat([work["loss"] * n, n]))
        return work["loss"]

    def step(self, plan: StepPlan, graph: bool = False) -> torch.Tensor:
        """One training step of a plan (moved to the device if it is not there): the step's loss
        as a device tensor (nothing is read back). ``graph=True`` on CUDA captures the step once
        per plan shape and replays it (the plan copied into the captured buffer)."""
        plan = plan.to(self.device)
        if not graph or self.device.type != "cuda":
            return self._run(plan)
        return self._replay(plan)

    def _replay(self, plan: StepPlan) -> torch.Tensor:  # pragma: no cover - needs CUDA
        entry = self._graphs.get(plan.key)
        if entry is None:
            # a new plan shape: one eager step (it compiles every kernel), then the capture of
            # the step on a copy of the plan, which later plans of this shape are copied into
            # (torch.cuda.graph synchronises once here: once per shape, and shapes are buckets)
            loss = self._run(plan)
            static = StepPlan(plan.buffer.clone(), plan.fields, plan.n_samples, plan.key)
            cuda_graph = torch.cuda.CUDAGraph()
            # thread_local: the planning threads pin memory meanwhile, which a global-mode capture forbids
            with torch.cuda.graph(cuda_graph, capture_error_mode="thread_local"):
                captured = self._run(static)
            self.steps -= 1  # the capture recorded the step, it ran nothing
            self._graphs[plan.key] = (cuda_graph, static, captured)
            return loss
        cuda_graph, static, loss = entry
        for i, (group, _) in enumerate(self._states):  # a changed lr lands in the captured tensor
            lr = group["lr"] * group.get("lr_scale", 1.0)
            if lr != self._lrs[i]:
                self.hyper[i, 0].fill_(lr)
                self._lrs[i] = lr
        static.buffer.copy_(plan.buffer, non_blocking=True)
        cuda_graph.replay()
        self.steps += 1
        return loss

    # ------------------------------------------------------------------ once per epoch
    def read(self) -> tuple[float, bool]:
        """The mean loss per sample since the last read and whether any loss was non-finite (the
        one synchronisation: call it once per epoch, or every N steps); writes the step counts
        back to the optimizer's state and resets the accumulator."""
        total, count = self.loss_sum.tolist()
        bad = bool(self.flag.item())
        self.loss_sum.zero_()
        for (_, state), step in zip(self._states, self.hyper[:, 5].tolist()):
            state["step"].fill_(step)
        return (total / count if count else float("nan")), bad
