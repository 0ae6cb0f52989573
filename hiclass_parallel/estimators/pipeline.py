"""A scikit-learn ``Pipeline`` that knows the hierarchical classifier's prediction methods.

``sklearn.pipeline.Pipeline`` passes ``X`` through its transformers for ``predict``,
``predict_proba`` and ``score`` only; the classifier's own methods (``predict_top_k``,
``predict_confidence``, ...) would need ``model[-1].predict_top_k(model[:-1].transform(X), k)``.
:class:`HierarchicalPipeline` adds them, each available exactly when the final step has it
(``available_if``, as scikit-learn does for ``predict_proba``). Everything else is scikit-learn's
``Pipeline``: ``clone``, ``get_params``/``set_params``, ``GridSearchCV`` over ``step__param``
names, caching and metadata routing of ``fit``, ``predict`` and ``score``.
"""

from __future__ import annotations

from typing import Any

from sklearn.pipeline import Pipeline
from sklearn.pipeline import make_pipeline as _sklearn_make_pipeline
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

__all__ = ["HierarchicalPipeline", "make_pipeline"]


def _final_estimator_has(name: str):
    """``available_if`` check: the final step has ``name`` (its own ``AttributeError`` otherwise)."""
    def check(self: Pipeline) -> bool:
        getattr(self._final_estimator, name)
        return True

    return check


class HierarchicalPipeline(Pipeline):
    """A ``Pipeline`` whose classifier methods take raw ``X`` (text, DataFrames...).

    The same parameters, attributes and methods as :class:`sklearn.pipeline.Pipeline`, plus
    the final step's :meth:`predict_top_k`, :meth:`predict_confidence`,
    :meth:`predict_labels`, :meth:`predict_node`, :meth:`predict_answer_proba` and
    :meth:`predict_stop_proba`: each transforms ``X`` with the fitted transformers, then
    calls the final step (a :class:`HierarchicalClassifier`, or anything with the method).

    Parameters
    ----------
    steps : list of (str, estimator) tuples
        As :class:`sklearn.pipeline.Pipeline`.
    transform_input : list of str, default=None
        As :class:`sklearn.pipeline.Pipeline`.
    memory : str or object with the joblib.Memory interface, default=None
        As :class:`sklearn.pipeline.Pipeline`.
    verbose : bool, default=False
        As :class:`sklearn.pipeline.Pipeline`.

    See Also
    --------
    make_pipeline : the same from the steps alone, named after their classes.

    Examples
    --------
    >>> from sklearn.feature_extraction.text import TfidfVectorizer
    >>> from hiclass_parallel.estimators import HierarchicalClassifier, make_pipeline
    >>> texts = ["red apple", "green pear", "steel saw", "cordless drill"] * 10
    >>> paths = ["food/fruit/apple", "food/fruit/pear", "tools/saw", "tools/drill"] * 10
    >>> model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(path_sep="/", max_epochs=5, random_state=0))
    >>> model = model.fit(texts, paths)
    >>> model.predict_top_k(["a red apple"], 2).shape
    (1, 2)
    >>> model.predict_confidence(["a red apple"]).shape
    (1,)
    """

    def _transformed(self, X: Any) -> Any:
        """``X`` through every fitted transformer (the final step excluded)."""
        check_is_fitted(self)
        Xt = X
        for _, transform in self.steps[:-1]:
            if transform is not None and transform != "passthrough":
                Xt = transform.transform(Xt)
        return Xt

    @available_if(_final_estimator_has("predict_top_k"))
    def predict_top_k(self, X: Any, k: int | None = None, return_log_prob: bool = False) -> Any:
        """The final step's ``predict_top_k`` of ``X`` transformed by the other steps.

        Parameters
        ----------
        X : iterable
            Raw input of the first step.
        k : int, default=None
            Number of paths (``None``: the classifier's ``top_k``).
        return_log_prob : bool, default=False
            Also return each path's log-probability.

        Returns
        -------
        paths : ndarray of shape (n_samples, k, n_levels), or (n_samples, k) with ``path_sep``
        log_prob : ndarray of shape (n_samples, k)
            Only with ``return_log_prob``.
        """
        return self.steps[-1][1].predict_top_k(self._transformed(X), k=k, return_log_prob=return_log_prob)

    @available_if(_final_estimator_has("predict_confidence"))
    def predict_confidence(self, X: Any) -> Any:
        """The final step's ``predict_confidence``: the calibrated probability that each answer is right.

        Parameters
        ----------
        X : iterable
            Raw input of the first step.

        Returns
        -------
        confidence : ndarray of shape (n_samples,)
        """
        return self.steps[-1][1].predict_confidence(self._transformed(X))

    @available_if(_final_estimator_has("predict_labels"))
    def predict_labels(self, X: Any) -> Any:
        """The final step's ``predict_labels``: the label of each answer.

        Parameters
        ----------
        X : iterable
            Raw input of the first step.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        return self.steps[-1][1].predict_labels(self._transformed(X))

    @available_if(_final_estimator_has("predict_node"))
    def predict_node(self, X: Any) -> Any:
        """The final step's ``predict_node``: the node id of each answer.

        Parameters
        ----------
        X : iterable
            Raw input of the first step.

        Returns
        -------
        nodes : ndarray of int64 of shape (n_samples,)
        """
        return self.steps[-1][1].predict_node(self._transformed(X))

    @available_if(_final_estimator_has("predict_answer_proba"))
    def predict_answer_proba(self, X: Any) -> Any:
        """The final step's ``predict_answer_proba``: each class's probability of being the answer.

        Parameters
        ----------
        X : iterable
            Raw input of the first step.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        return self.steps[-1][1].predict_answer_proba(self._transformed(X))

    @available_if(_final_estimator_has("predict_stop_proba"))
    def predict_stop_proba(self, X: Any) -> Any:
        """The final step's ``predict_stop_proba``.

        Parameters
        ----------
        X : iterable
            Raw input of the first step.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        return self.steps[-1][1].predict_stop_proba(self._transformed(X))


def make_pipeline(*steps: Any, memory: Any = None, transform_input: list[str] | None = None,
                  verbose: bool = False) -> HierarchicalPipeline:
    """A :class:`HierarchicalPipeline` of ``steps``, each named after its class.

    As :func:`sklearn.pipeline.make_pipeline`, whose step names it keeps (``tfidfvectorizer``,
    ``hierarchicalclassifier``: grid-search ``hierarchicalclassifier__lr`` and so on).

    Parameters
    ----------
    *steps : estimators
        Transformers, then the classifier.
    memory : str or object with the joblib.Memory interface, default=None
    transform_input : list of str, default=None
    verbose : bool, default=False

    Returns
    -------
    HierarchicalPipeline

    Examples
    --------
    >>> from sklearn.feature_extraction.text import TfidfVectorizer
    >>> from hiclass_parallel.estimators import HierarchicalClassifier, make_pipeline
    >>> model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(path_sep="/"))
    >>> [name for name, _ in model.steps]
    ['tfidfvectorizer', 'hierarchicalclassifier']
    """
    named = _sklearn_make_pipeline(*steps, memory=memory, transform_input=transform_input, verbose=verbose)
    return HierarchicalPipeline(named.steps, memory=memory, transform_input=transform_input, verbose=verbose)
