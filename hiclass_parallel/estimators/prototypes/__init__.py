"""Class prototypes that re-rank the answer: the ``Prototypes`` protocol both kinds follow, the
cosine kind and the fitting of the weight and scale (``_prototypes``), and the Gaussian kind of
dense rows (``_dense_prototypes``)."""
