"""Predicting: scores, probabilities, paths and the decoded answer (``_predict``)."""
