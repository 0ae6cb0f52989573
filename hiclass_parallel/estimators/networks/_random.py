"""The random numbers of one fit: a private ``torch.Generator``, never torch's global one.

torch's global generator is one per process: seeding it for a fit (and putting it back after)
is not thread safe. Two fits in two threads (joblib's threading backend, a web server) would
draw from one stream in an order the scheduler picks, and a fit would move (or rewind) the
stream of any other thread. So a seeded fit draws every random number it needs from its own
generator, :class:`FitRandom`: the initial weights of the default modules, the training
loader's shuffling, dropout, and the seed of the fused step's sampled softmax, each drawn as
torch would draw it from its global generator (the same numbers for the same seed). The generator
of the fit running in this thread is found through a context variable (each thread has its
own), set by :func:`drawing_from` around the fit; :func:`generator` reads it.

Outside a seeded fit (``random_state=None``, or a module used on its own) there is no private
generator and torch's global one serves, as in any torch code.

Examples
--------
>>> import torch
>>> from hiclass_parallel.estimators.networks._random import FitRandom, drawing_from, generator
>>> torch.manual_seed(7)
<torch._C.Generator object at ...>
>>> before = torch.get_rng_state()
>>> with drawing_from(FitRandom(seed=0)):
...     a = torch.rand(2, generator=generator())
>>> with drawing_from(FitRandom(seed=0)):
...     b = torch.rand(2, generator=generator())
>>> bool(torch.equal(a, b)), bool(torch.equal(torch.get_rng_state(), before))
(True, True)
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import RandomSampler

__all__ = ["Dropout", "FitRandom", "FitShuffle", "draws_from_fit_generator", "drawing_from", "generator", "linear",
           "loader_generator", "step_seed"]


class FitRandom:
    """The generators of one fit: one on the CPU (initial weights, shuffling, the sampler's
    seeds, dropout on the CPU) and, for a CUDA device, one there (dropout on the GPU).

    Parameters
    ----------
    seed : int, default=None
        Seeds both generators (a fresh stream); ``None`` without ``state``: seeded from the
        operating system's entropy.
    state : tuple, default=None
        ``(cpu state, cuda state or None)`` as :meth:`state` returned it: the stream resumes
        where a fit left it (``partial_fit`` after ``fit``).
    device : str or torch.device, default="cpu"
        Where the network trains.
    """

    def __init__(self, seed: int | None = None, state: tuple[Any, Any] | None = None, device: Any = "cpu"):
        device = torch.device(device)
        self.cpu = torch.Generator()
        self.cuda = None
        if device.type == "cuda" and torch.cuda.is_available():
            self.cuda = torch.Generator(device=device if device.index is not None else "cuda")
        if state is not None:
            self.cpu.set_state(state[0])
            if self.cuda is not None and state[1] is not None:
                self.cuda.set_state(state[1])
        elif seed is None:  # an unseeded stream (never the fit's own: a seeded fit gives a seed or a state)
            self.cpu.seed()
            if self.cuda is not None:
                self.cuda.seed()
        else:
            self.cpu.manual_seed(int(seed))
            if self.cuda is not None:
                self.cuda.manual_seed(int(seed))

    def for_device(self, device: torch.device) -> torch.Generator:
        """The generator for tensors on ``device``."""
        if device.type == "cuda" and self.cuda is not None:
            return self.cuda
        return self.cpu

    def state(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Both generators' states, for a later :class:`FitRandom` to resume from."""
        return self.cpu.get_state(), None if self.cuda is None else self.cuda.get_state()


_CURRENT: contextvars.ContextVar[FitRandom | None] = contextvars.ContextVar("hiclass_parallel_fit_random",
                                                                            default=None)


@contextlib.contextmanager
def drawing_from(random: FitRandom | None) -> Iterator[FitRandom | None]:
    """Inside, this thread's fit draws from ``random`` (``None``: torch's global generator)."""
    token = _CURRENT.set(random)
    try:
        yield random
    finally:
        _CURRENT.reset(token)


def generator(device: Any = None) -> torch.Generator | None:
    """The generator of the fit running in this thread, for tensors on ``device`` (the CPU by
    default); ``None`` outside a seeded fit (torch's global generator then serves)."""
    random = _CURRENT.get()
    if random is None:
        return None
    return random.for_device(torch.device("cpu") if device is None else torch.device(device))


def step_seed() -> int:
    """A seed for one training step's own sampler (the sampled softmax's draws, made by the C
    step or the device step's planner), drawn from the fit's generator (else torch's global
    one), on the training thread, in the batches' order."""
    return int(torch.randint(0, 2**62, (), generator=generator()).item())


def loader_generator(fitting: bool) -> torch.Generator | None:
    """The ``generator`` a ``DataLoader`` gets. A ``DataLoader`` draws a seed for its workers
    each time it is iterated from torch's global generator unless it is given one: a loader of
    a seeded fit's training loop (its training and validation batches) gets the fit's
    generator, any other loader a throwaway one (its draw is never used: no worker), so
    predicting leaves torch's global stream alone. ``None``: a loader of an unseeded fit
    (torch's global generator, as torch does)."""
    if fitting:
        return generator()
    return torch.Generator()


class FitShuffle(RandomSampler):
    """A shuffling sampler that draws each epoch's seed from ``source`` (the fit's generator)
    where ``RandomSampler`` draws it from torch's global generator: the same orders as torch's
    own shuffling would give after seeding torch's generator alike."""

    def __init__(self, data_source: Any, source: torch.Generator):
        super().__init__(data_source)
        self.source = source

    def __iter__(self) -> Iterator[int]:
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=self.source).item())
        order = torch.Generator()
        order.manual_seed(seed)
        yield from torch.randperm(len(self.data_source), generator=order).tolist()


def linear(n_in: int, n_out: int) -> nn.Linear:
    """``nn.Linear(n_in, n_out)``, initialised as torch does (the same draws, in the same
    order) but from the fit's generator when one is set."""
    gen = generator()
    if gen is None:
        return nn.Linear(n_in, n_out)
    layer = torch.nn.utils.skip_init(nn.Linear, n_in, n_out)  # built on the meta device: nothing drawn
    nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=gen)
    bound = 1 / math.sqrt(n_in) if n_in > 0 else 0
    nn.init.uniform_(layer.bias, -bound, bound, generator=gen)
    return layer


class Dropout(nn.Dropout):
    """``nn.Dropout`` whose masks come from the fit's generator when one is set (the same
    draws as torch's dropout would take from its global generator), else torch's dropout.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.estimators.networks._random import Dropout, FitRandom, drawing_from
    >>> layer = Dropout(0.5)
    >>> with drawing_from(FitRandom(seed=0)):
    ...     a = layer(torch.ones(6))
    >>> with drawing_from(FitRandom(seed=0)):
    ...     b = layer(torch.ones(6))
    >>> bool(torch.equal(a, b)), sorted(set(a.tolist())) <= [0.0, 2.0]
    (True, True)
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        gen = generator(input.device) if self.training and self.p > 0 else None
        if gen is None or self.inplace or input.numel() == 0:
            return super().forward(input)
        # torch's own dropout (aten's _dropout_impl): a Bernoulli(1 - p) mask scaled by 1 / (1 - p)
        noise = torch.empty_like(input).bernoulli_(1 - self.p, generator=gen)
        return input * noise.div_(1 - self.p)


def draws_from_fit_generator(module: type) -> bool:
    """Whether the module class draws its random numbers from the fit's generator: the
    package's modules say so in their own class body (``draws_from_fit_generator``); a
    subclass that does not say so again may draw from torch's global generator."""
    return isinstance(module, type) and bool(vars(module).get("draws_from_fit_generator", False))
