"""Predicting: the prediction methods (``_predict``: :class:`PredictMixin`, the scores,
probabilities, paths and decoded answers of a fitted classifier) and the answer at predict time,
decided by one dispatcher (``_decode``: :func:`decode`, model paths, re-ranking, decoding rule,
output form).

This face names what the other parts of :mod:`hiclass_parallel.estimators` use: the classifier
mixes in :class:`PredictMixin`; the fit decodes the net it has just trained (:func:`decoder_of`,
:func:`decode`); the explanations read the rows a re-ranking term scores (:func:`host_rows`) and label each term
as decoding does (:func:`term_label`).
"""

from ._decode import Decoded, Decoder, Route, check_semantics, decode, decoder_of, host_rows, term_label
from ._predict import PredictMixin

__all__ = ["Decoded", "Decoder", "PredictMixin", "Route", "check_semantics", "decode", "decoder_of", "host_rows",
           "term_label"]
