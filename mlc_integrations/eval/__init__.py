"""Evaluation harness: offline L2 model training, workloads, threshold sweeps,
side-by-side benchmarks and reports.

Kept apart from the library core: nothing in ``mlc_integrations`` imports this
package. It needs the ``eval`` extra (easy-vqa, scikit-image, matplotlib, tqdm).
"""
