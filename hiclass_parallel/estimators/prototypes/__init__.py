"""Class prototypes that re-rank the answer: the ``Prototypes`` protocol both kinds follow, the
cosine kind, the re-ranking and the likelihood that fits a weight and scale (``_prototypes``),
the Gaussian kind of dense rows (``_dense_prototypes``), and the prototypes' fit: the rows that
build them, their weight and scale chosen on held-out rows (``_fit_prototypes``)."""
