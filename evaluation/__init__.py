"""Evaluation harness: offline L2 model training, the verifier's training and
evidence, workloads, threshold sweeps, side-by-side benchmarks and reports.

Kept apart from the library and outside its wheel (numpy's and scikit-learn's
``benchmarks/``, sentence-transformers' ``examples/``): this package imports
``mlc_integrations``; the library never imports it. It runs from a checkout
(``python -m evaluation <command>``, or ``./dev mlc <command>``) and needs the
``eval`` extra (easy-vqa, scikit-image, scikit-learn, matplotlib, tqdm). Its data
paths are in :mod:`evaluation.paths`.
"""
