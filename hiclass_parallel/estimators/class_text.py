"""Class text inside a Pipeline: the classes' own names through the same fitted vectorizer.

:class:`ClassTextClassifier` holds a text vectorizer, a hierarchical classifier and a mapping
label -> text. Every ``fit`` (so every fold of ``cross_validate`` or ``GridSearchCV``) clones
both, fits the vectorizer on that fit's raw ``X`` only, turns ``X`` and the class texts into
features with it, and fits the classifier with the class texts as ``module__class_features``.
Nothing of a held-out fold reaches the vectorizer.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import (
    BaseEstimator,
    ClassifierMixin,
    MetaEstimatorMixin,
    _fit_context,
    clone,
)
from sklearn.utils import get_tags
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from .networks import MLP, SparseMLP, module_capabilities
from .multilabel import MultiLabelHierarchicalClassifier

__all__ = ["ClassTextClassifier"]

#: How many unknown labels an error message names before it says how many more there are.
_NAMED = 5


def _classifier_has(name: str):
    """``available_if`` check: the fitted classifier (else the unfitted one) has ``name``."""

    def check(self: ClassTextClassifier) -> bool:
        getattr(self.classifier_ if hasattr(self, "classifier_") else self.classifier, name)
        return True

    return check


def _describe(labels: list[Any]) -> str:
    named = ", ".join(repr(label) for label in labels[:_NAMED])
    return named + (f" (and {len(labels) - _NAMED} more)" if len(labels) > _NAMED else "")


class ClassTextClassifier(MetaEstimatorMixin, ClassifierMixin, BaseEstimator):
    """A text vectorizer and a hierarchical classifier that also reads the classes' own text.

    Give the classes' names or descriptions as a mapping label -> text. At every :meth:`fit`
    the vectorizer and the classifier are cloned, the vectorizer is fitted on the raw ``X`` of
    that fit only, and the class texts, transformed by that same fitted vectorizer (one row
    per class, in the order of the classifier's ``classes_``), are given to the classifier's
    clone as ``module__class_features`` (see :class:`SparseMLP`). In ``cross_validate`` and
    ``GridSearchCV`` each fold therefore has its own vocabulary from its own training rows.
    Use it alone on raw text or as the last step of a ``Pipeline``; tune
    ``vectorizer__*`` and ``classifier__*`` parameters as usual.

    Parameters
    ----------
    vectorizer : transformer
        Turns a list of strings into features (e.g. ``TfidfVectorizer``, or a ``Pipeline``
        ending in one). It is cloned at every fit; the given object is never fitted.
    classifier : HierarchicalClassifier or MultiLabelHierarchicalClassifier
        The classifier of the vectorizer's features. Its network must take class features
        (the default for sparse features, :class:`SparseMLP`, does). Cloned at every fit.
    class_text : mapping of label to str, default=None
        Text of the classes (a ``dict``, a pandas ``Series``...). Every key must be a class
        of the classifier's tree; with ``tree=None`` the tree is learnt from each fit's ``y``,
        so give ``tree`` when some classes may be missing from a fold. ``None``: no class
        text; the estimator then fits exactly what ``make_pipeline(vectorizer, classifier)``
        fits.
    missing_text : {"empty", "label"}, default="empty"
        The text of a class the mapping does not name. ``"empty"``: none (its row of class
        features is empty, its score has no lexical match). ``"label"``: the label as a string
        (``str(label)``), useful when labels are readable names ("Kitchen appliances"), noise
        when they are codes or synset ids.
    fit_vectorizer_on_class_text : bool, default=False
        Also fit the vectorizer on the class texts (as extra documents). ``False`` (the
        default) fits it on ``X`` only: a word that occurs only in class texts then gets no
        column. Such a word would gain nothing by one: its match weight is learnt only from
        training rows that contain it, and there are none, so it stays at its initial zero,
        while its input column adds an untrained random vector to any test row holding it
        and the extra documents shift every word's IDF. Both settings are measured in
        ``docs/performance.md``.

    Attributes
    ----------
    vectorizer_ : transformer
        The vectorizer fitted on the last fit's ``X``.
    classifier_ : estimator
        The classifier fitted on the vectorizer's features, with ``module__class_features``
        set when there is class text.
    class_features_ : scipy sparse matrix of shape (n_classes, n_features) or None
        The class texts through ``vectorizer_``, one row per class of ``classes_``.
    class_texts_ : list of str or None
        The text of every class, in the order of ``classes_`` (missing ones filled in as
        ``missing_text`` says).
    classes_ : ndarray of shape (n_classes,)
        The classifier's classes (``classifier_.classes_``).

    See Also
    --------
    HierarchicalClassifier : the classifier; ``module__class_features`` is the hand-built route.

    Notes
    -----
    Hold the class texts of held-out items out of ``class_text`` when you evaluate placing new
    items in a taxonomy: a real taxonomy would not hold their names yet. The mapping itself is
    fixed data of the task (like the tree), not something learnt from a fold.

    Examples
    --------
    >>> from sklearn.feature_extraction.text import TfidfVectorizer
    >>> from hiclass_parallel.datasets import load_wordnet_glosses
    >>> from hiclass_parallel.estimators import ClassTextClassifier, HierarchicalClassifier
    >>> data = load_wordnet_glosses("dog.n.01", include_lemmas=True)
    >>> # a class's text: its synset's name, "hunting_dog.n.01" -> "hunting dog"
    >>> names = {label: label.split(".")[0].replace("_", " ") for label in data.tree.labels}
    >>> clf = ClassTextClassifier(
    ...     TfidfVectorizer(sublinear_tf=True),
    ...     HierarchicalClassifier(data.tree, semantics="terminal", max_epochs=5, random_state=0),
    ...     class_text=names,
    ... ).fit(data.data, data.target)
    >>> clf.class_features_.shape == (data.tree.n_classes, len(clf.vectorizer_.vocabulary_))
    True
    >>> clf.predict(data.data[:2]).shape
    (2, 6)
    """

    _parameter_constraints: ClassVar[dict] = {
        "vectorizer": [HasMethods(["fit", "transform"])],
        "classifier": [HasMethods(["fit", "predict"])],
        "class_text": "no_validation",  # checked in fit, with errors that name the label
        "missing_text": [StrOptions({"empty", "label"})],
        "fit_vectorizer_on_class_text": ["boolean"],
    }

    def __init__(
        self,
        vectorizer: Any,
        classifier: Any,
        class_text: Mapping | None = None,
        *,
        missing_text: str = "empty",
        fit_vectorizer_on_class_text: bool = False,
    ):
        self.vectorizer = vectorizer
        self.classifier = classifier
        self.class_text = class_text
        self.missing_text = missing_text
        self.fit_vectorizer_on_class_text = fit_vectorizer_on_class_text

    # ------------------------------------------------------------------ fitting
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> ClassTextClassifier:
        """Fit the vectorizer on ``X``, then the classifier on its features and the class texts.

        A fit that fails, or is interrupted (Ctrl-C raises ``KeyboardInterrupt`` out of it),
        leaves the fitted attributes as they were before the call.

        Parameters
        ----------
        X : iterable of str of shape (n_samples,)
            Raw documents, as the vectorizer takes them.
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            Labels as the classifier takes them.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the rows, passed to the classifier's ``fit`` (the vectorizer is fitted
            unweighted, as in a ``Pipeline``). With metadata routing, request it with
            ``set_fit_request(sample_weight=True)`` on this estimator.

        Returns
        -------
        self : ClassTextClassifier
        """
        given = self._check_class_text()
        classifier = clone(self.classifier)
        vectorizer = clone(self.vectorizer)
        # Everything fitted lands on self at the end, together: a failed or interrupted fit
        # (Ctrl-C included) leaves the previous model whole.
        if given is None:
            texts, class_features = None, None
            features = vectorizer.fit_transform(X, y)
        else:
            self._check_classifier(classifier)
            classes = self._classes(classifier, y)
            texts = self._texts(given, classes)
            if self.fit_vectorizer_on_class_text:
                vectorizer.fit(list(X) + [t for t in texts if t])
                features = vectorizer.transform(X)
            else:
                features = vectorizer.fit_transform(X, y)
            self._check_module(classifier, features)
            class_features = sp.csr_matrix(vectorizer.transform(texts))
            classifier.set_params(module__class_features=class_features)
        classifier.fit(features, y, **({} if sample_weight is None else {"sample_weight": sample_weight}))
        self.class_texts_, self.class_features_ = texts, class_features
        self.vectorizer_, self.classifier_ = vectorizer, classifier
        return self

    def _check_class_text(self) -> dict[Any, str] | None:
        """``class_text`` as a dict; a text that is not a string is a named error."""
        if self.class_text is None:
            return None
        if not isinstance(self.class_text, Mapping) and not callable(getattr(self.class_text, "items", None)):
            raise TypeError(
                "class_text must be a mapping of label -> text (a dict or a pandas Series), "
                f"got {type(self.class_text).__name__}"
            )
        given = dict(self.class_text.items())
        for label, text in given.items():
            if not isinstance(text, str):
                raise TypeError(f"class_text[{label!r}] must be a string, got {type(text).__name__}: {text!r}")
        return given

    def _check_classifier(self, classifier: Any) -> None:
        params = classifier.get_params(deep=False)
        if not hasattr(type(classifier), "_targets") or "tree" not in params:
            raise TypeError(
                f"class_text needs a HierarchicalClassifier (or MultiLabelHierarchicalClassifier) as classifier, "
                f"got {type(classifier).__name__}"
            )
        if params.get("module__class_features") is not None:
            raise ValueError(
                "the classifier already has module__class_features; give either class_text here or "
                "module__class_features there, not both"
            )

    def _check_module(self, classifier: Any, features: Any) -> None:
        """The network the classifier will build must take ``class_features``."""

        module = classifier.get_params(deep=False).get("module")
        if module is None:  # the classifier's default (fitting/_config.resolve_module)
            dense_label_sets = isinstance(classifier, MultiLabelHierarchicalClassifier) and not sp.issparse(features)
            module = MLP if dense_label_sets else SparseMLP
        if not isinstance(module, type) or not module_capabilities(module).class_features:
            name = getattr(module, "__name__", type(module).__name__)
            raise TypeError(
                f"the classifier's module {name} cannot take class features (its __init__ has no "
                "class_features argument); use SparseMLP (the default for sparse features) or a module that "
                "takes class_features, or leave class_text=None"
            )

    @staticmethod
    def _classes(classifier: Any, y: Any) -> np.ndarray:
        """The classes the classifier will have, in its ``classes_`` order (learnt from ``y``
        when its ``tree`` is None), read by its own label encoder."""
        params = classifier.get_params(deep=False)
        targets = type(classifier)._targets(params["tree"], params.get("pad_label"), type(classifier).__name__,
                                            sep=params.get("path_sep"))
        return np.asarray(targets.fit(y).classes)

    def _texts(self, given: dict[Any, str], classes: np.ndarray) -> list[str]:
        position = {label: i for i, label in enumerate(classes.tolist())}
        unknown = [label for label in given if label not in position]
        if unknown:
            raise ValueError(
                f"class_text names {len(unknown)} label(s) that are not classes of the classifier's tree: "
                f"{_describe(unknown)}"
            )
        fill = (lambda label: str(label)) if self.missing_text == "label" else (lambda label: "")
        texts = [fill(label) for label in classes.tolist()]
        for label, text in given.items():
            texts[position[label]] = text
        return texts

    # ------------------------------------------------------------------ fitted state
    @property
    def classes_(self) -> np.ndarray:
        check_is_fitted(self, "classifier_")
        return self.classifier_.classes_

    def _features(self, X: Any) -> Any:
        check_is_fitted(self, "classifier_")
        return self.vectorizer_.transform(X)

    # ------------------------------------------------------------------ prediction (delegated)
    @available_if(_classifier_has("predict"))
    def predict(self, X: Any) -> np.ndarray:
        """The classifier's :meth:`~HierarchicalClassifier.predict` of the vectorized ``X``."""
        return self.classifier_.predict(self._features(X))

    @available_if(_classifier_has("predict_proba"))
    def predict_proba(self, X: Any) -> np.ndarray:
        """The classifier's ``predict_proba`` of the vectorized ``X``."""
        return self.classifier_.predict_proba(self._features(X))

    @available_if(_classifier_has("predict_log_proba"))
    def predict_log_proba(self, X: Any) -> np.ndarray:
        """The classifier's ``predict_log_proba`` of the vectorized ``X``."""
        return self.classifier_.predict_log_proba(self._features(X))

    @available_if(_classifier_has("decision_function"))
    def decision_function(self, X: Any) -> np.ndarray:
        """The classifier's ``decision_function`` of the vectorized ``X``."""
        return self.classifier_.decision_function(self._features(X))

    @available_if(_classifier_has("predict_top_k"))
    def predict_top_k(self, X: Any, k: int | None = None, return_log_prob: bool = False) -> Any:
        """The classifier's ``predict_top_k`` of the vectorized ``X``."""
        return self.classifier_.predict_top_k(self._features(X), k=k, return_log_prob=return_log_prob)

    @available_if(_classifier_has("predict_answer_proba"))
    def predict_answer_proba(self, X: Any) -> np.ndarray:
        """The classifier's ``predict_answer_proba`` of the vectorized ``X``."""
        return self.classifier_.predict_answer_proba(self._features(X))

    @available_if(_classifier_has("predict_confidence"))
    def predict_confidence(self, X: Any) -> np.ndarray:
        """The classifier's ``predict_confidence`` of the vectorized ``X``."""
        return self.classifier_.predict_confidence(self._features(X))

    @available_if(_classifier_has("predict_node"))
    def predict_node(self, X: Any) -> np.ndarray:
        """The classifier's ``predict_node`` of the vectorized ``X``."""
        return self.classifier_.predict_node(self._features(X))

    @available_if(_classifier_has("predict_labels"))
    def predict_labels(self, X: Any) -> np.ndarray:
        """The classifier's ``predict_labels`` of the vectorized ``X``."""
        return self.classifier_.predict_labels(self._features(X))

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """The classifier's ``score`` (hierarchical F1 for :class:`HierarchicalClassifier`)."""
        return self.classifier_.score(self._features(X), y, sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        vectorizer, classifier = get_tags(self.vectorizer), get_tags(self.classifier)
        tags.input_tags = copy.deepcopy(vectorizer.input_tags)  # raw documents, as the vectorizer takes them
        tags.target_tags = copy.deepcopy(classifier.target_tags)
        tags.classifier_tags = copy.deepcopy(classifier.classifier_tags)
        tags.non_deterministic = classifier.non_deterministic
        return tags
