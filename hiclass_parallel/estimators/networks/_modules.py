"""Default torch modules for :class:`~hiclass_parallel.estimators.HierarchicalClassifier`.

Modules are passed to the classifier as classes, never instances, and built by skorch with
``module__*`` parameters. The classifier fills in ``n_features`` (from ``X``) and
``n_outputs`` (from the tree: :func:`hiclass_parallel.ops.groups.n_outputs`) when the
module's ``__init__`` accepts them. Nothing here is a lambda, so fitted models pickle.

Both default modules, :class:`MLP` (dense input) and :class:`SparseMLP` (sparse input), score
columns on demand: ``encode(X)`` gives the hidden representation and ``scorer(hidden)`` a
score function of (sample, column) pairs over the output layer, so the classifier trains the
sibling partition path-locally and decodes it best-first; ``forward`` gives every score.

Examples
--------
>>> import torch
>>> from hiclass_parallel import Tree
>>> from hiclass_parallel.estimators import MLP
>>> from hiclass_parallel.losses import HierarchicalCrossEntropy, PathLocalCrossEntropy
>>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
>>> net = MLP(n_features=4, n_outputs=tree.n_classes, hidden_units=8).double()
>>> X, y = torch.randn(3, 4, dtype=torch.float64), torch.tensor([6, 2, 5])
>>> local = PathLocalCrossEntropy(tree)(net.scorer(net.encode(X)), y)  # the groups on each path
>>> full = HierarchicalCrossEntropy(tree, "sibling")(net(X), y)  # every score
>>> bool(torch.isclose(local, full))
True
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from ._random import Dropout, generator, linear

__all__ = ["MLP", "ColumnScorer", "SparseLinear", "SparseMLP", "TextBatch"]


class MLP(nn.Module):
    """The classifier's default network for dense input: a multi-layer perceptron, columns on demand.

    Hidden layers (linear, activation, dropout) then a linear output layer with one score per
    output of the tree. ``forward`` gives every score; :meth:`encode` (every layer but the
    last: the last hidden representation, ``X`` itself for a linear model) and :meth:`scorer`
    (the output layer as a score function of the columns asked for) let the classifier train
    the sibling partition path-locally (only the groups on each labelled path are scored) and
    decode best-first (only the children of expanded nodes), as :class:`SparseMLP` does.

    Parameters
    ----------
    n_features : int
        Width of the input; set by the classifier from ``X``.
    n_outputs : int
        Width of the output: one score per class, plus one stop score per group when the
        classifier uses ``stop=True``; set by the classifier from the tree.
    hidden_units : int or sequence of int, default=256
        Width of the hidden layer, or of each hidden layer for a sequence. ``0`` or an
        empty sequence gives a linear model.
    dropout : float, default=0.0
        Dropout probability after each hidden layer (active only while training).
    activation : type of nn.Module, default=nn.ReLU
        Activation class (not an instance), built once per hidden layer.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.estimators import MLP
    >>> module = MLP(n_features=4, n_outputs=9, hidden_units=8)
    >>> X = torch.randn(2, 4)
    >>> with torch.no_grad():
    ...     scores = module(X)
    ...     some = module.scorer(module.encode(X))(torch.tensor([0, 1]), torch.tensor([7, 2]))
    >>> scores.shape, module.encode(X).shape
    (torch.Size([2, 9]), torch.Size([2, 8]))
    >>> torch.allclose(some, torch.stack([scores[0, 7], scores[1, 2]]))
    True
    """

    #: Its initial weights and dropout masks come from the seeded fit's own generator
    #: (``_random``), never torch's global one (a subclass that adds layers of its own draws
    #: from torch's global generator; the fit then seeds that one instead: ``_fit.seeded``).
    draws_from_fit_generator = True

    def __init__(
        self,
        n_features: int,
        n_outputs: int,
        hidden_units: int | Sequence[int] = 256,
        dropout: float = 0.0,
        activation: type[nn.Module] = nn.ReLU,
    ):
        super().__init__()
        # Named errors for what would otherwise build a different network silently (-1 gave a
        # linear model) or fail deep inside torch. The classifier's name is module__hidden_units.
        what = f"hidden_units={hidden_units!r} (module__hidden_units of the classifier)"
        if isinstance(hidden_units, bool) or not (
            hasattr(hidden_units, "__index__") or isinstance(hidden_units, Sequence)
        ):
            raise TypeError(f"{what}: must be an int width or a sequence of int widths")
        if hasattr(hidden_units, "__index__"):
            width = operator.index(hidden_units)
            if width < 0:
                raise ValueError(f"{what}: a width cannot be negative (0 means no hidden layer)")
            widths = [width] if width > 0 else []
        else:
            if any(isinstance(w, bool) or not hasattr(w, "__index__") for w in hidden_units):
                raise TypeError(f"{what}: every width must be an int")
            widths = [operator.index(w) for w in hidden_units]
            if any(w <= 0 for w in widths):
                raise ValueError(f"{what}: every width of a sequence must be positive")
        if isinstance(dropout, bool) or not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if isinstance(activation, nn.Module) or not isinstance(activation, type):
            raise TypeError(
                f"activation must be an nn.Module class such as nn.ReLU (not an instance), got {activation!r}"
            )
        layers: list[nn.Module] = []
        width_in = int(n_features)
        for width in widths:
            layers.append(linear(width_in, width))
            layers.append(activation())
            if dropout > 0:
                layers.append(Dropout(float(dropout)))
            width_in = width
        layers.append(linear(width_in, int(n_outputs)))
        self.layers = nn.Sequential(*layers)
        self.n_features = int(n_features)
        self.n_outputs = int(n_outputs)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.layers(X)

    def encode(self, X: torch.Tensor) -> torch.Tensor:
        """The last hidden representation ``(batch, width)``: every layer but the output layer
        (``X`` itself when ``hidden_units=0``)."""
        for layer in self.layers[:-1]:
            X = layer(X)
        return X

    def scorer(self, hidden: torch.Tensor) -> _ColumnScores:
        """Score function ``(samples, columns) -> scores`` of the output layer on hidden rows:
        one product against the distinct columns asked for, and ``linear_parts()`` for the
        C best-first search, as :meth:`SparseMLP.scorer` (the gradients here are dense)."""
        return _ColumnScores(_LinearColumns(self.layers[-1]), hidden)


class _LinearColumns:
    """An ``nn.Linear`` output layer seen as a :class:`ColumnScorer` (the ``block`` and
    ``linear_weights`` that :class:`_ColumnScores` reads). Not a module: :class:`MLP` keeps the
    layer in ``layers``, so its saved state is what it always was. Its gradients are dense."""

    def __init__(self, linear: nn.Linear):
        self.linear = linear

    def block(self, h: torch.Tensor, columns: torch.Tensor | None) -> torch.Tensor:
        """``(B, len(columns))`` scores of the rows ``h`` against ``columns`` (``None``: all)."""
        weight, bias = self.linear.weight, self.linear.bias
        if columns is None:
            return nn.functional.linear(h, weight, bias)
        return torch.addmm(bias.index_select(0, columns), h, weight.index_select(0, columns).t())

    def linear_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weight, bias)`` of the layer."""
        return self.linear.weight, self.linear.bias


def _csr_parts(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Column indices, row offsets and values of a torch sparse CSR batch."""
    crow = X.crow_indices()
    return X.col_indices(), crow[:-1], X.values()


class SparseLinear(nn.Module):
    """A linear layer whose cost follows the input's non-zeros: ``X @ weight + bias``.

    A torch sparse CSR batch (what the classifier feeds for a scipy sparse ``X``) goes
    through an ``EmbeddingBag`` sum weighted by the values: O(non-zeros x width) per batch,
    and with ``sparse=True`` the gradient touches only the rows of the features present.
    A dense batch is an ordinary matrix product with the same weights.

    Parameters
    ----------
    n_features : int
        Width of the input.
    width : int
        Width of the output.
    sparse : bool, default=True
        Give the weight a sparse gradient (needs an optimizer that takes sparse gradients,
        such as :class:`~hiclass_parallel.estimators.LazyAdam`).

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.estimators import SparseLinear
    >>> import warnings
    >>> layer = SparseLinear(5, 3)
    >>> dense = torch.tensor([[0.0, 2.0, 0.0, 0.0, 1.0]])
    >>> with warnings.catch_warnings():  # torch calls sparse CSR tensors beta
    ...     warnings.simplefilter("ignore")
    ...     sparse = dense.to_sparse_csr()
    >>> torch.allclose(layer(sparse), layer(dense))
    True
    """

    def __init__(self, n_features: int, width: int, sparse: bool = True):
        super().__init__()
        bound = 1.0 / max(int(n_features), 1) ** 0.5  # nn.Linear's default initialisation
        # _weight: the table is drawn once, here (its own default draw, replaced at once, is a
        # noticeable share of a fit when the features number hundreds of thousands), on the
        # device the tensors are made on (a GPU when the net builds the module there:
        # ``TreeNet.initialize_module``), from the fit's generator for that device
        gen = generator(torch.get_default_device())
        self.embedding = nn.EmbeddingBag(int(n_features), int(width), mode="sum", sparse=bool(sparse),
                                         _weight=torch.empty(int(n_features), int(width)).uniform_(
                                             -bound, bound, generator=gen))
        self.bias = nn.Parameter(torch.empty(int(width)).uniform_(-bound, bound, generator=gen))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if X.layout == torch.sparse_csr:
            cols, offsets, values = _csr_parts(X)
            out = self.embedding(cols, offsets, per_sample_weights=values.to(self.bias.dtype))
        else:
            out = X.to(self.bias.dtype) @ self.embedding.weight
        return out + self.bias


class ColumnScorer(nn.Module):
    """An output layer that scores whole rows or only the columns asked for.

    ``forward(h)`` gives every column, ``h @ weight.T + bias``; :meth:`scorer` gives a score
    function ``(samples, columns) -> scores`` for path-local training and best-first
    decoding, which touches only the rows of ``weight`` it is asked for (sparse gradients).

    With ``class_features`` (a text per column, over a vocabulary of ``V`` features), the
    hidden batch is a :class:`TextBatch`: the rows plus their weighted input on the
    vocabulary features present in the batch (:class:`SparseMLP` builds it), and each column
    adds the lexical match ``sum_j x_j w_j f_cj`` (those entries times its feature row).

    Parameters
    ----------
    width : int
        Width of the hidden representation (without the vocabulary entries).
    n_outputs : int
        Number of columns.
    class_features : scipy sparse matrix of shape (n_rows, V), default=None
        Feature rows of the first ``n_rows <= n_outputs`` columns over the vocabulary; the
        other columns (stops) have none.
    """

    def __init__(self, width: int, n_outputs: int, class_features: Any = None):
        super().__init__()
        # _weight: drawn once (the default draw of nn.Embedding would be replaced at once)
        std = 1.0 / max(int(width), 1) ** 0.5
        self.weight = nn.Embedding(int(n_outputs), int(width), sparse=True,
                                   _weight=torch.empty(int(n_outputs), int(width)).normal_(
                                       std=std, generator=generator(torch.get_default_device())))
        self.bias = nn.Embedding(int(n_outputs), 1, sparse=True, _weight=torch.zeros(int(n_outputs), 1))
        self.width = int(width)
        self.has_text = class_features is not None
        if self.has_text:
            F = sp.csr_matrix(class_features, dtype=np.float32)
            n_rows = F.shape[0]
            ptr = np.concatenate([F.indptr, np.full(int(n_outputs) - n_rows, F.indptr[-1])])  # stops: empty rows
            self.register_buffer("text_ptr", torch.as_tensor(ptr.astype(np.int64)))
            self.register_buffer("text_idx", torch.as_tensor(F.indices.astype(np.int64)))
            self.register_buffer("text_val", torch.as_tensor(F.data))

    def _text_rows(self, columns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Row (position in ``columns``), feature and value of every non-zero of the columns' text."""
        start = self.text_ptr[columns]
        lengths = self.text_ptr[columns + 1] - start
        offsets = torch.cumsum(lengths, 0) - lengths
        row = torch.repeat_interleave(torch.arange(columns.shape[0], device=columns.device), lengths)
        pos = start[row] + torch.arange(row.shape[0], device=columns.device) - offsets[row]
        return row, self.text_idx[pos], self.text_val[pos]

    def _match(self, batch: TextBatch, columns: torch.Tensor | None) -> torch.Tensor:
        """Lexical match ``(B, len(columns))`` of a batch's weighted vocabulary entries."""
        words = batch.words
        if columns is None:
            columns = torch.arange(self.weight.num_embeddings, device=words.device)
        row, feature, value = self._text_rows(columns)
        if batch.present is not None:
            # Only the features present in the batch can match: their positions in `words`.
            pos = torch.searchsorted(batch.present, feature)
            pos = pos.clamp_max(max(batch.present.shape[0] - 1, 0))
            hit = batch.present[pos] == feature if batch.present.shape[0] else torch.zeros_like(pos, dtype=torch.bool)
            row, feature, value = row[hit], pos[hit], value[hit]
        rows = torch.sparse_coo_tensor(torch.stack([row, feature]), value.to(words.dtype),
                                       (columns.shape[0], words.shape[1]), check_invariants=False)
        return torch.sparse.mm(rows, words.t()).t()

    def forward(self, h: torch.Tensor | TextBatch) -> torch.Tensor:
        return self.block(h, None)

    def block(self, h: torch.Tensor | TextBatch, columns: torch.Tensor | None) -> torch.Tensor:
        """``(B, len(columns))`` scores of the hidden rows ``h`` against ``columns`` (``None``: all,
        read from the weights without a lookup)."""
        rows = h.h if isinstance(h, TextBatch) else h
        if columns is None:
            scores = torch.addmm(self.bias.weight.squeeze(1), rows, self.weight.weight.t())
        else:
            scores = torch.addmm(self.bias(columns).squeeze(-1), rows, self.weight(columns).t())
        if self.has_text:
            scores = scores + self._match(h, columns)
        return scores

    def scorer(self, h: torch.Tensor):
        """Score function of the rows of ``h``: ``score(samples, columns) -> (T,)``."""
        return _ColumnScores(self, h)

    def linear_weights(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(weight, bias)`` of the plain linear layer; ``None`` with class text (the match
        term is no plain linear layer)."""
        if self.has_text:
            return None
        return self.weight.weight, self.bias.weight[:, 0]


class _ColumnScores:
    """``score(samples, columns)`` of a :class:`ColumnScorer` (or of :class:`MLP`'s output layer,
    :class:`_LinearColumns`) on hidden rows ``h`` (picklable)."""

    def __init__(self, head: ColumnScorer | _LinearColumns, h: torch.Tensor | TextBatch):
        self.head, self.h = head, h
        self._scored: tuple[torch.Tensor, torch.Tensor] | None = None  # (columns, block) of the last call
        self._matched: tuple[Any, ...] | None = None  # matched_linear_parts(), built once

    def __call__(self, samples: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        # The rows of a batch share most of their columns (the upper groups of the tree), so
        # one matrix product against the distinct columns beats per-pair dot products: it
        # reads each weight row once, runs as BLAS, and the sparse gradient has no repeats.
        # In decoding, where each row also expands groups of its own, per-pair products and a
        # shared/own split were no faster.
        unique, where = torch.unique(columns, return_inverse=True)
        block = self.head.block(self.h, unique)
        self._scored = (unique, block)
        return block[samples, where]

    def matrix(self, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """``(len(rows), len(columns))`` scores of those hidden rows against those columns.

        Columns already scored by the last call (the in-batch level term asks for the
        batch's ancestors, all on its scored paths) are read from that block: a second
        lookup of the same weight rows would add a second sparse gradient to merge at every
        step.
        """
        if self._scored is not None and columns.numel() and self._scored[0].numel():
            unique, block = self._scored
            pos = torch.searchsorted(unique, columns).clamp_max(unique.numel() - 1)
            if bool((unique[pos] == columns).all()):
                return block.index_select(1, pos).index_select(0, rows)  # columns first: the small side
        return self.head.block(self.h[rows], columns)

    @property
    def linear_parts(self) -> Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None:
        """``() -> (h, weight, bias)``: best-first decoding on the CPU searches each row in C from
        these; ``None`` with class text, whose match term is no plain linear layer (the batched
        search scores it through ``__call__``)."""
        weights = self.head.linear_weights()
        if weights is None:
            return None
        return lambda: (self.h, *weights)

    @property
    def matched_linear_parts(self) -> Callable[[], tuple[Any, ...]] | None:
        """With class text: ``() -> (h, weight, bias, match)``, the linear layer plus the
        lexical match as a sparse term (the rows' weighted vocabulary entries against the
        columns' texts), so that best-first decoding searches in C as without class text.
        ``None`` without class text. Built once per hidden batch (the decoder asks for the parts
        both to pick its route and to search)."""
        head = self.head
        if not getattr(head, "has_text", False) or not isinstance(self.h, TextBatch):
            return None

        def parts() -> tuple[Any, ...]:
            if self._matched is not None:
                return self._matched
            words = self.h.words.detach()
            present = self.h.present if self.h.present is not None else torch.arange(words.shape[1])
            nz = words.nonzero()  # row-major: each row's entries together
            rows, cols = nz[:, 0], nz[:, 1]
            row_ptr = torch.zeros(words.shape[0] + 1, dtype=torch.int64)
            row_ptr[1:] = torch.cumsum(torch.bincount(rows, minlength=words.shape[0]), 0)
            row_idx = present[cols]
            width = 1 + max(int(row_idx.max()) if row_idx.numel() else 0,
                            int(head.text_idx.max()) if head.text_idx.numel() else 0)
            match = (row_ptr, row_idx, words[rows, cols], head.text_ptr, head.text_idx,
                     head.text_val.to(words.dtype), width)
            self._matched = (self.h.h, head.weight.weight, head.bias.weight[:, 0], match)
            return self._matched

        return parts


class TextBatch:
    """A hidden batch of :class:`SparseMLP` with class text: the rows, and their weighted input
    on the class-vocabulary features present in the batch.

    Only those features can match a class text, and a batch holds few of them (about 2,000
    of 25,793 on person.n.01), so the match works on ``(B, present)`` instead of
    ``(B, vocabulary)`` entries.

    Attributes
    ----------
    h : torch.Tensor of shape (B, hidden_units)
    words : torch.Tensor of shape (B, n_present)
        ``x_j * w_j`` of each row on each present feature.
    present : torch.Tensor of shape (n_present,) or None
        Ascending vocabulary positions of the columns of ``words``; ``None``: every position.

    Examples
    --------
    >>> import warnings
    >>> import scipy.sparse as sp
    >>> import torch
    >>> from hiclass_parallel.estimators import SparseMLP
    >>> names = sp.csr_matrix([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]])  # 3 class texts
    >>> net = SparseMLP(n_features=4, n_outputs=3, hidden_units=2, class_features=names)
    >>> with warnings.catch_warnings():  # torch calls sparse CSR tensors beta
    ...     warnings.simplefilter("ignore")
    ...     batch = net.encode(torch.tensor([[0.0, 0.5, 0.0, 1.0]]).to_sparse_csr())
    >>> batch.shape, batch.present.tolist()  # feature 1 is the only class-text feature present
    (torch.Size([1, 2]), [1])
    """

    __slots__ = ("h", "words", "present")

    def __init__(self, h: torch.Tensor, words: torch.Tensor, present: torch.Tensor | None):
        self.h, self.words, self.present = h, words, present

    def __getitem__(self, rows: Any) -> TextBatch:
        return TextBatch(self.h[rows], self.words[rows], self.present)

    @property
    def shape(self) -> torch.Size:
        return self.h.shape

    @property
    def device(self) -> torch.device:
        return self.h.device


class SparseMLP(nn.Module):
    """The classifier's default network for sparse input (text): sparse in, columns on demand.

    ``SparseLinear`` (cost O(non-zeros x hidden)), an activation and dropout, then a
    :class:`ColumnScorer`: with the sibling partition the classifier trains it path-locally
    (only the groups on each labelled path are scored) and decodes best-first (only the
    children of expanded nodes are scored). ``forward`` still returns every score, so
    ``predict_proba`` and the exhaustive routes work as with :class:`MLP`.

    Parameters
    ----------
    n_features : int
        Width of the input; set by the classifier from ``X``.
    n_outputs : int
        Number of scores (classes plus stops); set by the classifier from the tree.
    hidden_units : int, default=256
        Width of the hidden representation. 256 is as accurate as wider layers on WordNet
        glosses, and the input layer and its optimizer state grow with it (a row per
        feature).
    dropout : float, default=0.0
        Dropout probability on the hidden representation while training.
    input_dropout : float, default=0.0
        Dropout probability on the input's non-zero values while training (word dropout
        for bag-of-words features).
    activation : type of nn.Module or None, default=None
        Activation class after the sparse layer; ``None`` keeps it linear (a low-rank
        linear model, which generalises best on TF-IDF text).
    class_features : scipy sparse matrix of shape (n_classes, n_features), default=None
        Text of the classes themselves, in the same feature space as ``X`` (for example
        ``vectorizer.transform(class_names)``), one row per class in the tree's node-id order
        (``tree.labels``); a matrix of ``n_outputs`` rows also gives the stop columns a row.
        Through :class:`HierarchicalClassifier` one row per class is enough: it gives each stop
        column (sibling partition) the row of its node, and
        :class:`MultiLabelHierarchicalClassifier` each copy of a DAG class the class's row.
        Each column's score then adds a lexical match ``sum_j x_j w_j f_cj`` with one learnt
        weight ``w_j`` per feature of the class texts (zero at the start): an input that names
        a class can point to it even when the class was never a training target
        (``docs/class-text.md``; measured in ``docs/performance.md``).
    class_feature_scale : float, default=300.0
        Multiplier of the match weights: Adam moves a weight by about the learning rate per
        step, and TF-IDF products are small, so unscaled weights stay a fraction of a logit.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.estimators import SparseMLP
    >>> net = SparseMLP(n_features=6, n_outputs=4, hidden_units=8)
    >>> X = torch.tensor([[0.0, 1.0, 0, 0, 0, 2.0]])
    >>> with torch.no_grad():
    ...     scores = net(X)
    ...     some = net.scorer(net.encode(X))(torch.tensor([0, 0]), torch.tensor([2, 3]))
    >>> scores.shape
    torch.Size([1, 4])
    >>> torch.allclose(some, scores[0, 2:])
    True
    """

    def __init__(
        self,
        n_features: int,
        n_outputs: int,
        hidden_units: int = 256,
        dropout: float = 0.0,
        input_dropout: float = 0.0,
        activation: type[nn.Module] | None = None,
        class_features: Any = None,
        class_feature_scale: float = 300.0,
    ):
        super().__init__()
        if isinstance(hidden_units, bool) or not hasattr(hidden_units, "__index__") or operator.index(hidden_units) <= 0:
            raise ValueError(f"module__hidden_units must be a positive int, got {hidden_units!r}")
        hidden_units = operator.index(hidden_units)
        for name, p in (("dropout", dropout), ("input_dropout", input_dropout)):
            if not 0.0 <= float(p) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {p!r}")
        if activation is not None and (isinstance(activation, nn.Module) or not isinstance(activation, type)):
            raise TypeError(f"activation must be an nn.Module class such as nn.ReLU, or None; got {activation!r}")
        self.input = SparseLinear(n_features, hidden_units)
        self.activation = nn.Identity() if activation is None else activation()
        self.dropout = Dropout(float(dropout))
        self.input_dropout = Dropout(float(input_dropout))
        self.n_features = int(n_features)
        self.n_outputs = int(n_outputs)
        words = self._class_vocabulary(class_features)
        self.head = ColumnScorer(hidden_units, n_outputs, class_features=words)
        self.class_feature_scale = float(class_feature_scale)

    def _class_vocabulary(self, class_features: Any) -> Any:
        """Check ``class_features``; keep its vocabulary; return its rows over that vocabulary."""
        if class_features is None:
            return None
        if not sp.issparse(class_features):
            raise TypeError(
                "module__class_features must be a scipy sparse matrix (n_classes, n_features), "
                f"got {type(class_features).__name__}"
            )
        F = sp.csr_matrix(class_features, dtype=np.float32)
        if F.shape[1] != self.n_features or not 0 < F.shape[0] <= self.n_outputs:
            raise ValueError(
                f"module__class_features has shape {F.shape}: it needs one row per class of the tree (at most "
                f"{self.n_outputs} rows, the number of scores) and one column per feature of X ({self.n_features})"
            )
        if not np.isfinite(F.data).all():
            raise ValueError("module__class_features holds NaN or infinite values")
        # Only features that occur in some class text can match: the rest need no weight.
        vocabulary = np.unique(F.indices)
        position = np.full(self.n_features, -1, dtype=np.int64)
        position[vocabulary] = np.arange(vocabulary.size)
        self.register_buffer("vocabulary", torch.as_tensor(vocabulary.astype(np.int64)))
        self.register_buffer("vocabulary_position", torch.as_tensor(position))
        self.match_weight = nn.Parameter(torch.zeros(vocabulary.size))
        F = sp.csr_matrix((F.data, position[F.indices], F.indptr), shape=(F.shape[0], vocabulary.size))
        return F

    def _words(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The input on the class vocabulary times the scaled match weights, and the vocabulary
        positions of its columns: ``(B, n_present)`` over the features present in a sparse
        batch, ``(B, V)`` and ``None`` (all) for dense input."""
        weight = self.class_feature_scale * self.match_weight
        if X.layout != torch.sparse_csr:
            return X[:, self.vocabulary].to(weight.dtype) * weight, None
        cols, _, values = _csr_parts(X)
        crow = X.crow_indices()
        row = torch.repeat_interleave(torch.arange(X.shape[0], device=cols.device), crow[1:] - crow[:-1])
        k = self.vocabulary_position[cols]
        hit = k >= 0
        present, slot = torch.unique(k[hit], return_inverse=True)
        words = weight.new_zeros(X.shape[0], present.shape[0])
        words = words.index_put((row[hit], slot), values[hit].to(weight.dtype), accumulate=True)
        return words * weight[present], present

    #: Its initial weights and dropout masks come from the seeded fit's own generator
    #: (``_random``), never torch's global one (a subclass that adds layers of its own draws
    #: from torch's global generator; the fit then seeds that one instead: ``_fit.seeded``).
    draws_from_fit_generator = True
    #: Built on the device it trains on (``TreeNet.initialize_module``): its tables are drawn
    #: there, not drawn on the host and copied over.
    init_on_device = True
    #: The classifier feeds scipy sparse input to this module as torch sparse CSR batches.
    accepts_sparse = True
    #: LazyAdam's default groups: the input layer (a row per feature) keeps one second moment
    #: per row (a fraction of the memory and traffic of one per entry) and learns at 3x the rate
    #: of the output layer (more exact answers, at the cost of overconfident probabilities, which
    #: the calibration corrects); a moment per row on the output layer, whose rows are classes,
    #: loses exact accuracy, so it keeps one per entry. Both tables keep their first moments in
    #: bfloat16 (the same answers; the moment takes half the memory).
    lazy_adam_groups = (("input.embedding.weight", {"second_moment": "row", "lr_scale": 3.0, "first_moment": "bfloat16"}),
                        ("head.weight.weight", {"first_moment": "bfloat16"}))

    def encode(self, X: torch.Tensor) -> torch.Tensor | TextBatch:
        """The hidden representation ``(batch, hidden_units)``; with ``class_features``, a
        :class:`TextBatch` of it and the batch's weighted input on the class vocabulary."""
        if self.training and self.input_dropout.p > 0:
            if X.layout == torch.sparse_csr:
                X = torch.sparse_csr_tensor(
                    X.crow_indices(), X.col_indices(), self.input_dropout(X.values()), size=X.shape,
                    check_invariants=False,
                )
            else:
                X = self.input_dropout(X)
        h = self.dropout(self.activation(self.input(X)))
        if self.head.has_text:
            return TextBatch(h, *self._words(X))
        return h

    def scorer(self, hidden: torch.Tensor | TextBatch) -> _ColumnScores:
        """Score function ``(samples, columns) -> scores`` of hidden rows (see :class:`ColumnScorer`)."""
        return self.head.scorer(hidden)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.head(self.encode(X))
