"""ClassTextClassifier: class text through the same fitted vectorizer, in Pipeline, CV and grid search."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from hiclass_parallel.datasets import load_wordnet_glosses
from hiclass_parallel.estimators import MLP, ClassTextClassifier, HierarchicalClassifier


@pytest.fixture(scope="module")
def dogs():
    data = load_wordnet_glosses("dog.n.01", include_lemmas=True)
    labels = list(data.tree.labels)
    # Names of every other class, given in a shuffled order: the rest get missing_text.
    order = np.random.default_rng(0).permutation(len(labels))[::2]
    names = {labels[i]: labels[i].split(".")[0].replace("_", " ") for i in order}
    return data, names


def _clf(tree, **kw):
    return HierarchicalClassifier(tree, **{"semantics": "terminal", "max_epochs": 2, "random_state": 0, **kw})


def _lower(texts):
    return [t.lower() for t in texts]


def test_equals_the_hand_built_class_features(dogs):
    data, names = dogs
    X, y = data.data[:150], data.target[:150]
    est = ClassTextClassifier(TfidfVectorizer(sublinear_tf=True), _clf(data.tree), names).fit(X, y)
    # By hand: the same vectorizer fitted on X only, one text per class in classes_ order.
    vec = TfidfVectorizer(sublinear_tf=True).fit(X)
    assert vec.vocabulary_ == est.vectorizer_.vocabulary_
    texts = [names.get(label, "") for label in data.tree.labels]
    assert est.class_texts_ == texts
    F = vec.transform(texts)
    assert (abs(F - est.class_features_)).nnz == 0
    hand = _clf(data.tree, module__class_features=F).fit(vec.transform(X), y)
    assert est.classifier_.get_params()["module__class_features"] is est.class_features_
    held_out = data.data[150:]
    np.testing.assert_array_equal(est.predict(held_out), hand.predict(vec.transform(held_out)))
    # equal up to float32 rounding of the products (threads may sum in another order)
    np.testing.assert_allclose(est.predict_proba(held_out), hand.predict_proba(vec.transform(held_out)), atol=1e-5)
    labels, log_prob = est.predict_top_k(held_out, k=3, return_log_prob=True)
    hand_labels, hand_log_prob = hand.predict_top_k(vec.transform(held_out), k=3, return_log_prob=True)
    np.testing.assert_array_equal(labels, hand_labels)
    np.testing.assert_allclose(log_prob, hand_log_prob, rtol=1e-5, atol=1e-5)
    assert est.score(held_out, data.target[150:]) == pytest.approx(hand.score(vec.transform(held_out), data.target[150:]))
    np.testing.assert_array_equal(est.classes_, hand.classes_)
    # the given estimators stay unfitted
    assert not hasattr(est.vectorizer, "vocabulary_") and not hasattr(est.classifier, "net_")


def test_without_class_text_it_is_the_plain_pipeline(dogs):
    data, _ = dogs
    X, y = data.data[:150], data.target[:150]
    est = ClassTextClassifier(TfidfVectorizer(), _clf(data.tree)).fit(X, y)
    plain = make_pipeline(TfidfVectorizer(), _clf(data.tree)).fit(X, y)
    assert est.class_features_ is None and "module__class_features" not in est.classifier_.get_params()
    np.testing.assert_array_equal(est.predict_proba(data.data[150:]), plain.predict_proba(data.data[150:]))


def test_each_cv_fold_has_its_own_vocabulary(dogs):
    data, names = dogs
    X, y = np.asarray(data.data, dtype=object), data.target
    cv = KFold(3, shuffle=True, random_state=0)
    est = ClassTextClassifier(CountVectorizer(), _clf(data.tree, max_epochs=1), names)
    out = cross_validate(est, X, y, cv=cv, return_estimator=True)
    assert np.isfinite(out["test_score"]).all()
    for fitted, (train, test) in zip(out["estimator"], cv.split(X)):
        vocabulary = set(fitted.vectorizer_.vocabulary_)
        assert vocabulary == set(CountVectorizer().fit(X[train]).vocabulary_)
        only_in_test = set(CountVectorizer().fit(X[test]).vocabulary_) - vocabulary
        assert only_in_test  # the test fold has words of its own, and none reached the vectorizer
        assert fitted.class_features_.shape == (data.tree.n_classes, len(vocabulary))
        assert fitted.classifier_.n_features_in_ == len(vocabulary)


def test_grid_search_over_vectorizer_and_classifier_params_as_a_pipeline_step(dogs):
    data, names = dogs
    pipe = make_pipeline(FunctionTransformer(_lower),
                         ClassTextClassifier(TfidfVectorizer(), _clf(data.tree, max_epochs=1), names))
    # two candidates that differ in both a vectorizer and a classifier parameter (fewer fits than 2 x 2)
    vec, width = "classtextclassifier__vectorizer__ngram_range", "classtextclassifier__classifier__module__hidden_units"
    grid = GridSearchCV(pipe, [{vec: [(1, 1)], width: [8]}, {vec: [(1, 2)], width: [16]}],
                        cv=KFold(2, shuffle=True, random_state=0))
    grid.fit(data.data, data.target)
    assert len(grid.cv_results_["params"]) == 2 and np.isfinite(grid.cv_results_["mean_test_score"]).all()
    best = grid.best_estimator_[-1]
    assert best.vectorizer_.ngram_range == grid.best_params_[vec]
    assert best.classifier_.net_.module_.input.embedding.weight.shape[1] == grid.best_params_[width]


def test_clone_and_params_round_trip(dogs):
    data, names = dogs
    est = ClassTextClassifier(TfidfVectorizer(min_df=2), _clf(data.tree), names, missing_text="label")
    params = est.get_params()
    assert params["vectorizer__min_df"] == 2 and params["classifier__max_epochs"] == 2
    assert params["class_text"] is names and params["missing_text"] == "label"
    copy = clone(est)
    assert copy.class_text == names and copy.get_params().keys() == params.keys()
    copy.set_params(vectorizer__min_df=1, classifier__max_epochs=3, fit_vectorizer_on_class_text=True)
    assert copy.vectorizer.min_df == 1 and copy.classifier.max_epochs == 3 and est.vectorizer.min_df == 2
    tags = est.__sklearn_tags__()
    assert tags.input_tags.string and not tags.input_tags.two_d_array and tags.target_tags.required


def test_missing_text_and_fitting_the_vectorizer_on_class_text(dogs):
    data, _ = dogs
    label = data.tree.labels[0]
    unique = {label: "zzyzx"}  # a word no gloss has
    est = ClassTextClassifier(TfidfVectorizer(), _clf(data.tree, max_epochs=1), unique, missing_text="label",
                              fit_vectorizer_on_class_text=True).fit(data.data, data.target)
    assert "zzyzx" in est.vectorizer_.vocabulary_ and est.class_features_[0].nnz == 1
    assert est.class_texts_[1:] == [str(other) for other in data.tree.labels[1:]]
    alone = clone(est).set_params(fit_vectorizer_on_class_text=False, classifier__max_epochs=0)
    alone.fit(data.data, data.target)
    assert "zzyzx" not in alone.vectorizer_.vocabulary_ and sp.issparse(alone.class_features_)


@pytest.mark.parametrize("case, error, match", [
    ("unknown", ValueError, "not classes of the classifier's tree: 'no_such.n.01'"),
    ("not_a_string", TypeError, r"class_text\['dog.n.01'\] must be a string, got int"),
    ("not_a_mapping", TypeError, "class_text must be a mapping"),
    ("module", TypeError, "module MLP cannot take class features"),
    ("flat", TypeError, "needs a HierarchicalClassifier"),
    ("both", ValueError, "already has module__class_features"),
])
def test_named_errors(dogs, case, error, match):
    data, names = dogs
    clf, text = _clf(data.tree), dict(names)
    if case == "unknown":
        text["no_such.n.01"] = "nothing"
    elif case == "not_a_string":
        text["dog.n.01"] = 3
    elif case == "not_a_mapping":
        text = ["dog"]
    elif case == "module":
        clf.set_params(module=MLP)
    elif case == "flat":
        clf = LogisticRegression()
    elif case == "both":
        clf.set_params(module__class_features=sp.csr_matrix((1, 1)))
    with pytest.raises(error, match=match):
        ClassTextClassifier(TfidfVectorizer(), clf, text).fit(data.data, data.target)


def test_example_runs():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "class_text_pipeline.py"
    spec = importlib.util.spec_from_file_location("example_class_text_pipeline", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    result = example.main(root="dog.n.01", epochs=2, cv=2)
    assert len(set(result["fold_vocabularies"])) == 2  # each fold fitted its own vectorizer
    for route in ("plain pipeline", "ClassTextClassifier"):
        assert 0.0 <= result[route]["exact"] <= result[route]["hf1"] <= 1.0


def test_the_pipeline_example_of_the_docs_runs(capsys):
    """docs/class-text.md's ClassTextClassifier example, as written there."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "class-text.md").read_text()
    section = text[text.index("## In a Pipeline: `ClassTextClassifier`"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    slow = 'semantics="terminal", random_state=0)'
    assert code.count(slow) == 1
    code = code.replace(slow, slow[:-1] + ", max_epochs=2)")  # fast; the docs train as a user would
    namespace: dict = {}
    exec(compile(code, "docs/class-text.md", "exec"), namespace)  # noqa: S102 - our own docs, run as written
    scores = [float(s) for s in re.findall(r"\d\.\d+", capsys.readouterr().out)]
    assert len(scores) == 3 and all(0.0 < s <= 1.0 for s in scores)


def test_rows_follow_classes_learnt_from_y_and_dag_labels(dogs):
    from hiclass_parallel.estimators import MultiLabelHierarchicalClassifier

    data, names = dogs
    # tree=None: the classes are learnt from y (here the labels of the first rows, flat)
    X, y = data.data[:60], data.target[:60]
    given = {label: f"name of {label}" for label in set(y.tolist())}
    est = ClassTextClassifier(TfidfVectorizer(), HierarchicalClassifier(max_epochs=0, random_state=0), given)
    est.fit(X, y)
    assert est.class_texts_ == [given[label] for label in est.classes_.tolist()]
    # a DAG's labels (every hypernym of a synset): one row per DAG class, in classes_ order
    multi = load_wordnet_glosses("dog.n.01", include_lemmas=True, hypernyms="all")
    est = ClassTextClassifier(TfidfVectorizer(), MultiLabelHierarchicalClassifier(multi.dag, semantics="terminal", max_epochs=0), names)
    est.fit(multi.data, multi.target)
    assert est.class_texts_ == [names.get(label, "") for label in est.classes_.tolist()]
    assert est.class_features_.shape[0] == len(est.classes_) == multi.dag.n_nodes


def test_calibrated_confidence_through_the_class_text_route(dogs):
    """The held-out rows come from the classifier's own split of the vectorized rows, and
    predict_confidence is the inner classifier's on the same features."""
    data, names = dogs
    X, y = data.data[:150], data.target[:150]
    est = ClassTextClassifier(TfidfVectorizer(), _clf(data.tree, calibration="beta", calibration_size=30), names)
    est.fit(X, y)
    assert est.classifier_.answer_.calibrator is not None and est.classifier_.answer_.calibrator.n_rows == 30
    rest = data.data[150:]
    np.testing.assert_array_equal(est.predict_confidence(rest),
                                  est.classifier_.predict_confidence(est.vectorizer_.transform(rest)))
