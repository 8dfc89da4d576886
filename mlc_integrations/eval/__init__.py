"""Evaluation harness: offline L2 model training, the verifier's training and
evidence, workloads, threshold sweeps, side-by-side benchmarks and reports.

Kept apart from the library: this package imports ``mlc_integrations``, and the
library never imports this package. The one bridge is the ``mlc`` command line
(``mlc_integrations/cli.py``), which imports eval modules lazily, inside each command
that needs them, so ``mlc --help``, ``quickstart``, ``stats`` and ``clear`` run
without it. It needs the ``eval`` extra (easy-vqa, scikit-image, scikit-learn,
matplotlib, tqdm).
"""
