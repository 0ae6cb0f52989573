"""Labels at mixed depths, read as terminal answers
================================================

Some samples are labelled with a leaf, others with an internal node that *is* their answer
(a document about dogs in general, not about a breed). With ``semantics="terminal"`` the
classifier learns stop scores and predicts internal nodes where the truth is internal; with
the paper's partial semantics every prediction runs to a leaf.

Run: ``python examples/mixed_depth_terminal.py``
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import train_test_split

from hiclass_parallel import HierarchicalClassifier
from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.metrics import hierarchical_f1_score


def main(n_samples: int = 4000, epochs: int = 30, seed: int = 0) -> dict:
    # flush=True: each stage shows at once, also when the output goes to a pipe or a log
    print(f"loading data: {n_samples} synthetic samples, 40% labelled at an internal node ...", flush=True)
    X, y, tree = make_hierarchical_classification(
        n_samples=n_samples, n_features=20, branching=3, depth=3, terminal_fraction=0.4, random_state=seed
    )
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=seed)
    truth_is_internal = ~tree.is_leaf[tree.to_ids(y_test)]
    results = {}
    for semantics in ("partial", "terminal"):
        clf = HierarchicalClassifier(tree, semantics=semantics, max_epochs=epochs, random_state=seed)
        print(f"training with semantics={semantics!r}, {epochs} epochs ...", flush=True)
        clf.fit(X_train, y_train)
        print(f"evaluating on {len(X_test)} held-out samples ...", flush=True)
        predicted_internal = ~tree.is_leaf[clf.predict_node(X_test)]
        h_f1 = hierarchical_f1_score(y_test, clf.predict(X_test), tree=tree)
        hit = float(np.mean(predicted_internal[truth_is_internal]))
        print(f"{semantics:>8}: hF1 {h_f1:.3f}; predicts an internal node for {hit:.0%} of samples whose truth is internal",
              flush=True)
        results[semantics] = {"hf1": h_f1, "internal_where_internal": hit}
    return results


if __name__ == "__main__":
    main()
