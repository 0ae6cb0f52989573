"""Experiment: class-side text (label features) for the WordNet hypernym task.

Each class of the WordNet tree is itself a synset with lemma names and a gloss. A flat
LinearSVC cannot use that text; a model that scores columns from a representation can: a
column's output embedding becomes ``E_c + V^T f_c``, where ``f_c`` is the class text in the
same TF-IDF space as ``X`` (DECAF / SiameseXML-style label features), encoded by a sparse
layer ``V`` (a second one, zero-initialised, or the input layer itself). Only the columns a
batch scores are encoded (path-local training); decoding encodes every column once per batch.

The leak, and how it is avoided: every synset under the root is both a class and a sample
(its text is the input, its parent the target). If a held-out row ``r`` defines synset ``s``,
the text of class ``s`` would be ``r``'s own input. ``r``'s target is ``s``'s parent, so this
is no direct label leak, but it is held-out text, and it stands for the new item, which in
real use is not yet in the taxonomy. Rule used here: a class has text only when its synset is
NOT a held-out sample (training-row synsets and the subset's root); the held-out synsets'
classes get an empty text row. The vectorizer is fitted on the training texts only, as in
``bench_text``.

Variants (``--variants``): ``base`` (the default model), ``sep`` (second encoder, gloss +
lemmas), ``shared`` (the input layer encodes class text too), ``sep-lemmas`` (lemma names
only), ``sep-nostop`` (stop columns without text), ``svc`` (LinearSVC on the same features).

Usage::

    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE python -m benchmarks.explore_class_text \\
        --subset person --variants base,sep,svc
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hiclass_parallel.estimators import SparseMLP  # noqa: E402

SUBSETS = {"animal": "animal.n.01", "person": "person.n.01", "artifact": "artifact.n.01", "dog": "dog.n.01"}


class ClassTextMLP(SparseMLP):
    """``SparseMLP`` whose column scores add ``h . V^T f_c``, the encoded class text ``class_features``.

    Experiment plumbing: the last input column carries each row's own synset node + 1 (0 for
    none); it is stripped before encoding and masks the class-text term of the row's own
    node's columns, so a training row never matches its own text (held-out rows' own nodes
    have no text, so training must not learn from that match either).
    """

    def __init__(self, n_features: int, n_outputs: int, class_features: Any = None, column_nodes: Any = None,
                 class_encoder: str = "separate", lexical: bool = False, lexical_scale: float = 30.0, **kwargs: Any):
        super().__init__(n_features - 1, n_outputs, **kwargs)
        F = sp.csr_matrix(class_features, dtype=np.float32)
        if F.shape != (n_outputs, n_features - 1):
            raise ValueError(f"class_features has shape {F.shape}, expected {(n_outputs, n_features - 1)}")
        self.register_buffer("f_ptr", torch.as_tensor(F.indptr.astype(np.int64)), persistent=False)
        self.register_buffer("f_idx", torch.as_tensor(F.indices.astype(np.int64)), persistent=False)
        self.register_buffer("f_val", torch.as_tensor(F.data), persistent=False)
        self.register_buffer("col_node", torch.as_tensor(np.asarray(column_nodes, dtype=np.int64)), persistent=False)
        self.class_encoder = class_encoder
        width = self.head.weight.weight.shape[1]
        if class_encoder == "separate":
            self.class_input = nn.EmbeddingBag(n_features - 1, width, mode="sum", sparse=True)
            nn.init.zeros_(self.class_input.weight)  # starts as the plain model
        self.own = None
        self.x = None
        # (c): a learnt weight per feature on the lexical match sum_j x_j f_cj w_j (full rank).
        self.lexical = nn.Parameter(torch.zeros(n_features - 1)) if lexical else None
        # Adam moves a weight by about lr per step; TF-IDF products are ~0.01-0.1, so without a
        # scale the term would stay a fraction of a logit (measured: no effect at all).
        self.lexical_scale = float(lexical_scale)
        self.register_buffer("k_of", torch.full((n_features - 1,), -1, dtype=torch.int64), persistent=False)

    def encode(self, X: torch.Tensor) -> torch.Tensor:
        if X.layout == torch.sparse_csr:
            crow, cols, vals = X.crow_indices(), X.col_indices(), X.values()
            B = X.shape[0]
            row = torch.repeat_interleave(torch.arange(B), crow[1:] - crow[:-1])
            last = cols == X.shape[1] - 1
            own = torch.zeros(B, dtype=torch.int64)
            own[row[last]] = vals[last].round().long()
            counts = torch.zeros(B, dtype=torch.int64).index_add_(0, row[~last], torch.ones_like(row[~last]))
            crow2 = torch.cat([crow.new_zeros(1), torch.cumsum(counts, 0)])
            X = torch.sparse_csr_tensor(crow2, cols[~last], vals[~last], size=(B, X.shape[1] - 1),
                                        check_invariants=False)
        else:
            own = X[:, -1].round().long()
            X = X[:, :-1]
        self.own = own - 1
        self.x = X
        return super().encode(X)

    def _bag(self) -> nn.EmbeddingBag:
        return self.class_input if self.class_encoder == "separate" else self.input.embedding

    def _rows(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """CSR positions, offsets and lengths of the class-feature rows ``cols``."""
        start, stop = self.f_ptr[cols], self.f_ptr[cols + 1]
        lengths = stop - start
        offsets = torch.cumsum(lengths, 0) - lengths
        total = int(lengths.sum())
        within = torch.arange(total, device=cols.device) - torch.repeat_interleave(offsets, lengths)
        return torch.repeat_interleave(start, lengths) + within, offsets, lengths

    def class_embed(self, cols: torch.Tensor | None) -> torch.Tensor:
        """Encoded class text of ``cols`` (``None``: every column), ``(len(cols), width)``."""
        if self.class_encoder == "none":
            n = self.n_outputs if cols is None else cols.shape[0]
            return self.head.weight.weight.new_zeros(n, self.head.weight.weight.shape[1])
        if cols is None:
            return self._bag()(self.f_idx, self.f_ptr[:-1], per_sample_weights=self.f_val)
        pos, offsets, _ = self._rows(cols)
        return self._bag()(self.f_idx[pos], offsets, per_sample_weights=self.f_val[pos])

    def lexical_scores(self, cols: torch.Tensor) -> torch.Tensor:
        """``(B, len(cols))``: sum_j x_bj f_cj w_j over the batch stored by ``encode``."""
        pos, _, lengths = self._rows(cols)
        fi, fv = self.f_idx[pos], self.f_val[pos]
        ru = torch.repeat_interleave(torch.arange(cols.shape[0]), lengths)
        K = torch.unique(fi)
        self.k_of[K] = torch.arange(K.shape[0])
        X = self.x
        B = X.shape[0]
        if X.layout == torch.sparse_csr:
            crow, xc, xv = X.crow_indices(), X.col_indices(), X.values()
            xr = torch.repeat_interleave(torch.arange(B), crow[1:] - crow[:-1])
        else:
            xr, xc = X.nonzero(as_tuple=True)
            xv = X[xr, xc]
        k = self.k_of[xc]
        hit = k >= 0
        XK = torch.zeros(B, K.shape[0]).index_put_((xr[hit], k[hit]), xv[hit].float(), accumulate=True)
        FU = torch.sparse_coo_tensor(torch.stack([ru, self.k_of[fi]]), fv, (cols.shape[0], K.shape[0]))
        self.k_of[K] = -1
        return torch.sparse.mm(FU, (XK * (self.lexical_scale * self.lexical[K])).t()).t()

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        h = self.encode(X)
        base = torch.addmm(self.head.bias.weight.squeeze(1), h, self.head.weight.weight.t())
        text = h @ self.class_embed(None).t()
        if self.lexical is not None:
            text = text + self.lexical_scores(torch.arange(self.n_outputs))
        keep = self.own[:, None] != self.col_node[None, :]
        return base + text * keep

    def scorer(self, hidden: torch.Tensor) -> "_TextScores":
        return _TextScores(self, hidden)


class _TextScores:
    def __init__(self, net: ClassTextMLP, h: torch.Tensor):
        self.net, self.h, self.own = net, h, net.own
        # Decoding scores many small sets of columns per batch: encode every column once.
        self.table = None if torch.is_grad_enabled() else net.class_embed(None)

    def __call__(self, samples: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        net = self.net
        unique, where = torch.unique(columns, return_inverse=True)
        scores = torch.addmm(net.head.bias(unique).squeeze(-1), self.h, net.head.weight(unique).t())
        text = None
        if net.class_encoder != "none":
            T = self.table[unique] if self.table is not None else net.class_embed(unique)
            text = self.h @ T.t()
        if net.lexical is not None:
            lex = net.lexical_scores(unique)
            text = lex if text is None else text + lex
        if text is not None:
            # A row never matches its own synset's text (see the class notes).
            keep = self.own[:, None] != net.col_node[unique][None, :]
            scores = scores + text * keep
        return scores[samples, where]


def make_data(root: str, seed: int = 0) -> dict[str, Any]:
    """``bench_text.make_text``'s split and TF-IDF, plus the class texts (see the module notes)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split

    from hiclass_parallel.datasets import load_wordnet_glosses

    data = load_wordnet_glosses(root, include_lemmas=True)
    tree = data.tree
    ids = tree.to_ids(data.target)
    rows = np.arange(len(data.data))
    # Same call as make_text (same arrays in the same order), so the same split.
    t_train, t_test, y_train, y_test, r_train, r_test = train_test_split(
        data.data, ids, rows, test_size=0.2, random_state=seed)
    vec = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), dtype=np.float32)
    X_train = vec.fit_transform(t_train).tocsr()
    X_test = vec.transform(t_test).tocsr()
    node_of_row = tree.to_ids(data.synsets)
    # The own synset node + 1 as one extra last column (see ClassTextMLP).
    X_train_own = sp.hstack([X_train, sp.csr_matrix(node_of_row[r_train, None] + 1.0, dtype=np.float32)]).tocsr()
    X_test_own = sp.hstack([X_test, sp.csr_matrix(node_of_row[r_test, None] + 1.0, dtype=np.float32)]).tocsr()
    gloss = [""] * tree.n_classes
    lemmas = [""] * tree.n_classes
    for r in r_train:  # held-out synsets keep an empty class text
        text = data.data[r]
        gloss[node_of_row[r]] = text
        lemmas[node_of_row[r]] = text.split(": ", 1)[0]
    return {"X_train": X_train, "X_test": X_test, "y_train": np.asarray(y_train), "y_test": np.asarray(y_test),
            "tree": tree, "vec": vec, "X_train_own": X_train_own, "X_test_own": X_test_own, "gloss": gloss, "lemmas": lemmas, "test_nodes": node_of_row[r_test]}


def class_features(d: dict[str, Any], kind: str, stop_text: bool = True) -> sp.csr_matrix:
    """TF-IDF rows of the class texts for every score column: classes, then one stop per internal node."""
    from hiclass_parallel.ops.groups import stop_columns

    tree = d["tree"]
    texts = d[kind]
    stop_col = stop_columns(tree, "sibling")
    internal = np.flatnonzero(stop_col >= 0)
    n_out = tree.n_classes + len(internal)
    col_text = list(texts) + [""] * len(internal)
    if stop_text:
        for node in internal:
            col_text[stop_col[node]] = texts[node]
    F = d["vec"].transform(col_text).tocsr()
    assert F.shape[0] == n_out
    nodes = np.concatenate([np.arange(tree.n_classes), internal[np.argsort(stop_col[internal])]])
    assert (stop_col[nodes[tree.n_classes:]] == np.arange(tree.n_classes, n_out)).all()
    return F, nodes


def score_all(d: dict[str, Any], pred: np.ndarray) -> dict[str, float]:
    from benchmarks.bench_text import score_text

    return score_text(d["tree"], d["y_train"], d["y_test"], pred)


def run_variant(d: dict[str, Any], variant: str, seed: int) -> dict[str, Any]:
    from benchmarks._peers import ids_of_label_paths
    from hiclass_parallel.estimators import HierarchicalClassifier

    from hiclass_parallel import Tree

    tree = Tree.from_parents(np.asarray(d["tree"].parents))  # id labels, as benchmarks._worker uses
    if variant == "svc":
        from sklearn.svm import LinearSVC

        t = time.perf_counter()
        m = LinearSVC().fit(d["X_train"], d["y_train"])
        fit = time.perf_counter() - t
        t = time.perf_counter()
        pred = np.asarray(tree.paths, dtype=np.int64)[m.predict(d["X_test"])]
        return {"fit_s": fit, "predict_s": time.perf_counter() - t, **score_all(d, pred)}
    params: dict[str, Any] = {"random_state": seed}
    X_train, X_test = d["X_train"], d["X_test"]
    if variant != "base":
        kind = "lemmas" if "lemmas" in variant else "gloss"
        F, nodes = class_features(d, kind, stop_text="nostop" not in variant)
        params["module"] = ClassTextMLP
        params["module__class_features"] = F
        params["module__column_nodes"] = nodes
        params["module__class_encoder"] = ("shared" if variant.startswith("shared") else
                                           "none" if variant.startswith("lexonly") else "separate")
        params["module__lexical"] = "lex" in variant
        if "@" in variant:
            params["module__lexical_scale"] = float(variant.split("@")[1])
        X_train, X_test = d["X_train_own"], d["X_test_own"]
        if "nomask" in variant:  # no own-node column: rows may match their own synset's text
            X_train, X_test = (sp.hstack([M, sp.csr_matrix((M.shape[0], 1), dtype=np.float32)]).tocsr()
                               for M in (d["X_train"], d["X_test"]))
    t = time.perf_counter()
    model = HierarchicalClassifier(tree, semantics="terminal", **params).fit(X_train, d["y_train"])
    fit = time.perf_counter() - t
    t = time.perf_counter()
    pred = ids_of_label_paths(tree, model.predict(X_test), model.pad_label_)
    out = {"fit_s": fit, "predict_s": time.perf_counter() - t, **score_all(d, pred)}
    out["epochs"] = len(model.net_.history)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--subset", default="person")
    p.add_argument("--variants", default="base,sep,svc")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    d = make_data(SUBSETS[args.subset], args.seed)
    n_text = sum(bool(t) for t in d["gloss"])
    print(f"{args.subset}: {d['tree'].n_classes} classes, {d['X_train'].shape} train, {n_text} classes with text",
          flush=True)
    results = {}
    for v in args.variants.split(","):
        r = run_variant(d, v, args.seed)
        r["loadavg"] = open("/proc/loadavg").read().split()[:3]
        results[v] = r
        print(f"  {v}: fit {r['fit_s']:.1f}s pred {r['predict_s']:.1f}s hF1 {r['hf1']:.3f} exact {r['exact']:.3f} "
              f"unseen {r['hf1_unseen']:.3f} load {r['loadavg']}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
