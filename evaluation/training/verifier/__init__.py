"""Training and evidence for the reuse verifier (:mod:`mlc_integrations.verify`).

* ``data``: labelled pairs (qqp_val, easy-vqa), cached embeddings, signal matrices;
* ``fit``: the models (trees, logistic, embedding head), out-of-fold scores,
  calibration and the JSON export;
* ``metrics``: precision-recall measurements and table cells;
* ``vqa``: easy-vqa evidence (refusals by pair kind, an engine stream);
* ``online``: the error-bounded policy over a long stream, and its latency.

The command line is ``python -m evaluation.training.train_verifier``. The features
come from the library itself (``mlc_integrations.verify.text.signals``): nothing here
redefines what the served models read.
"""
