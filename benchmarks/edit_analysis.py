"""What the edit analysis (``verify/text/edits.py``) costs per candidate pair.

Every verified L1/L2 candidate is analysed once (its features and, on a refusal, its
words come from the same memoized analysis). Measured side by side in one run, so the
machine's load cancels out of the ratios:

* short pairs (everyday edits: antonym, argument swap, paraphrase, added constraint),
  each analysed fresh (a counter appended defeats the per-pair memo), lexicon warm;
* pasted documents (thousands of repetitive words): the alignment must stay bounded;
* the reference: ``difflib.SequenceMatcher`` on the same whitespace tokens, the
  word diff refusals once used.

    python benchmarks/edit_analysis.py [--repeats 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import time

from mlc_integrations.verify.text.edits import analyse

SHORT = [("What is the person on the left holding?", "What is the person on the right holding?"),
         ("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?"),
         ("What does this picture show?", "What is shown in this image?"),
         ("Explain tides.", "Explain tides in two sentences for a child.")]
LONG = [("what is it? " * 500, "how is it? " * 500),
        (" ".join(["cat", "dog", "red", "run"] * 400), " ".join(["dog", "cat", "blue", "walk"] * 400)),
        ("lorem ipsum dolor " * 800 + "is it red?", "lorem ipsum dolor " * 800 + "is it blue?")]


def _ms(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    for a, b in SHORT:
        analyse(stored=a, new=b)  # load the lexicon and warm its caches, as a running cache would be
    short, ref = [], []
    for i in range(args.repeats):
        for a, b in SHORT:
            short.append(_ms(lambda: analyse(stored=a + f" {i}", new=b)))
            ref.append(_ms(lambda: difflib.SequenceMatcher(None, (a + f" {i}").split(), b.split()).get_opcodes()))
    long_ms = [_ms(lambda: analyse(stored=a, new=b)) for a, b in LONG]
    long_ref = [_ms(lambda: difflib.SequenceMatcher(None, a.split(), b.split()).get_opcodes()) for a, b in LONG]
    out = {
        "short_pairs_median_ms": statistics.median(short),
        "short_pairs_p90_ms": sorted(short)[int(0.9 * len(short))],
        "short_pairs_word_diff_median_ms": statistics.median(ref),
        "short_ratio_analysis_to_word_diff": statistics.median(short) / max(statistics.median(ref), 1e-9),
        "long_texts_ms": long_ms,
        "long_texts_word_diff_ms": long_ref,
        "long_ratio_analysis_to_word_diff": [x / max(y, 1e-9) for x, y in zip(long_ms, long_ref)],
    }
    for k, v in out.items():
        print(f"{k}: {[round(x, 3) for x in v] if isinstance(v, list) else round(v, 3)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
