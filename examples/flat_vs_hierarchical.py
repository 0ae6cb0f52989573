"""A hierarchical classifier against a flat one on the same data.

The flat model is scikit-learn's LogisticRegression over the labels as given (labels at any
depth are just classes to it; its prediction is one label, whose ancestral path we score).
The hierarchical model trains every level of each path and decodes valid paths. Both are
scored with hierarchical F1 and mistake severity on the same split.

Run: ``python examples/flat_vs_hierarchical.py``
"""

from __future__ import annotations

from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from hiclass_parallel import HierarchicalClassifier
from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.metrics import hierarchical_f1_score, mistake_severity


def main(n_samples: int = 6000, epochs: int = 20, seed: int = 0) -> dict:
    X, y, tree = make_hierarchical_classification(
        n_samples=n_samples, n_features=30, branching=4, depth=3, noise=2.0, truncate_fraction=0.2, random_state=seed
    )
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=seed)
    models = {
        "flat logistic regression": make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)),
        "hierarchical (level)": make_pipeline(StandardScaler(), HierarchicalClassifier(tree, max_epochs=epochs, random_state=seed)),
        "hierarchical (sibling)": make_pipeline(
            StandardScaler(), HierarchicalClassifier(tree, partition="sibling", max_epochs=epochs, random_state=seed)
        ),
    }
    results = {}
    for name, model in models.items():
        pred = model.fit(X_train, y_train).predict(X_test)
        h_f1 = hierarchical_f1_score(y_test, pred, tree=tree)
        severity = mistake_severity(y_test, pred, tree=tree)
        print(f"{name:>26}: hierarchical F1 {h_f1:.3f}, mistake severity {severity:.2f}")
        results[name] = {"hf1": h_f1, "severity": severity}
    return results


if __name__ == "__main__":
    main()
