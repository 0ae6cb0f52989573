"""The re-ranking of the answer: class prototypes and the flat linear term beside them. The
``Prototypes`` protocol both prototype kinds follow, the cosine kind, the re-ranking and the
likelihood that fits a weight and scale (``_prototypes``), the Gaussian kind of dense rows
(``_dense_prototypes``), the prototypes' fit: the rows that build them, their weight and scale
chosen on held-out rows (``_fit_prototypes``), and the flat linear term's SVM margins
(``_flat_margins``)."""
