"""The verifier: signals, the JSON model, the policy, and its engine hook."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pytest

from mlc_integrations import CacheRequest
from mlc_integrations.verify import (
    DEFAULT_VERIFIER_PATH,
    SIGNAL_NAMES,
    TEXT_FEATURE_NAMES,
    VERIFIER_FORMAT,
    VerificationPolicy,
    Verifier,
    VerifierFormatError,
    WordWeights,
    exact_answer_match,
    extract_signals,
    make_policy,
    pair_features,
    text_features,
)
from mlc_integrations import VerifierOptions, WriteOptions


def sig(a: str, b: str, cos: float = 0.9) -> dict[str, float]:
    return extract_signals(stored=a, new=b, cosine=cos)


# ----------------------------------------------------------------------------- signals
def test_negation_signal() -> None:
    assert sig("Is there a cat in the picture?", "Is there no cat in the picture?")["negation_mismatch"] == 1
    assert sig("Why isn't it working?", "Why is it working?")["negation_mismatch"] == 1
    assert sig("is there not a circle?", "is no circle present?")["negation_mismatch"] == 0
    assert sig("Is there a cat?", "Is a cat present?")["negation_mismatch"] == 0


def test_number_signal() -> None:
    s = sig("What is 15% of 80?", "What is 25% of 80?")
    assert s["number_mismatch"] == 1 and s["number_diff"] == 2
    assert sig("I have two dogs", "I have 3 dogs")["number_mismatch"] == 1
    assert sig("I have two dogs", "I have 2 dogs")["number_mismatch"] == 0
    assert sig("It costs 1,000 dollars", "It costs 1000 dollars")["number_mismatch"] == 0
    assert sig("Router 1.8.0.0 support", "Router 2.8.0.0 support")["number_mismatch"] == 1
    assert sig("sequence 4,6,12,18?", "sequence 5,6,12,18?")["number_mismatch"] == 1
    assert sig("the 2nd time", "the second time")["number_mismatch"] == 0
    # "one" is a number only when the other side has numbers too
    assert sig("Which one is better?", "Which is better?")["number_mismatch"] == 0
    assert sig("Which one is better?", "Which two are better?")["number_mismatch"] == 1


def test_unit_and_date_signals() -> None:
    assert sig("How far is 5 km?", "How far is 5 miles?")["unit_mismatch"] == 1
    assert sig("How far is 5 km?", "How far is 5 kilometers?")["unit_mismatch"] == 1  # not unified: refuse-safe
    assert sig("Price in $", "Price in €")["unit_mismatch"] == 1
    assert sig("What happened in March?", "What happened in April?")["date_mismatch"] == 1
    assert sig("Is it open today?", "Is it open tomorrow?")["date_mismatch"] == 1
    assert sig("Is it open today?", "Is it open today ?")["date_mismatch"] == 0


def test_attribute_and_content_signals() -> None:
    s = sig("is there a red shape?", "is there a blue shape?")
    assert s["attribute_mismatch"] == 2 and s["content_substituted"] == 1
    s = sig("is there a triangle?", "is there a circle?")
    assert s["attribute_mismatch"] == 2
    s = sig("is there a triangle?", "is there a triangle in the image?")
    assert s["attribute_mismatch"] == 0 and s["content_substituted"] == 0 and s["content_added"] == 1


def test_attribute_words_come_from_the_lexicon_not_from_one_data_set() -> None:
    """Colours, shapes and words with an antonym, whatever data set they come from."""
    assert sig("Is the lamp above the table?", "Is the lamp below the table?")["attribute_mismatch"] == 2
    assert sig("Is the soup hot?", "Is the soup cold?")["attribute_mismatch"] == 2
    assert sig("Is the car crimson?", "Is the car purple?")["attribute_mismatch"] == 2  # colours
    assert sig("Draw a rhombus.", "Draw a trapezoid.")["attribute_mismatch"] == 2  # shapes no list named
    assert sig("Who wrote Hamlet?", "Who wrote Macbeth?")["attribute_mismatch"] == 0
    s = sig("What is the best Christmas gift you've ever given?", "What is the best Christmas gift you've ever received?")
    assert s["content_substituted"] == 1
    # plurals fold, so they are not a difference
    assert sig("best books on Python", "best book on Python")["content_diff"] == 0


def test_question_word_entity_order_length_signals() -> None:
    assert sig("Why did pigeons become extinct?", "When did pigeons become extinct?")["wh_mismatch"] == 1
    assert sig("Best food in Paris?", "Best food in London?")["entity_diff"] == 2
    s = sig("What to import from Canada and sell in India?", "What to import from India and sell in Canada?")
    assert s["order_swaps"] >= 1 and s["content_diff"] == 0
    assert sig("a b c", "a b c")["order_swaps"] == 0
    s = sig("How do I learn?", "How do I learn Python fast and well?")
    assert s["length_diff"] == 4 and s["length_ratio"] == pytest.approx(4 / 8)
    assert sig("x", "y", 0.42)["cosine"] == pytest.approx(0.42)


def test_word_weights_make_rare_differences_count_more() -> None:
    df, n = WordWeights.fit(["how to learn python"] * 10 + ["how to learn java", "learn rust"])
    w = WordWeights(df, n)
    common = extract_signals(stored="how to learn", new="how to learn python", cosine=0.9, weights=w)["diff_weight"]
    rare = extract_signals(stored="how to learn", new="how to learn rust", cosine=0.9, weights=w)["diff_weight"]
    assert rare > common > 0


def test_signal_vector_is_complete_and_deterministic() -> None:
    a = sig("Is 3 > 2 on Monday in Paris?", "is two bigger than three?")
    assert list(a) == list(SIGNAL_NAMES)
    assert a == sig("Is 3 > 2 on Monday in Paris?", "is two bigger than three?")
    assert all(np.isfinite(v) for v in a.values())
    assert all(np.isfinite(v) for v in sig("", "").values())


# ----------------------------------------------------------------------------- model file
def _logistic_verifier(a: float = 40.0, b: float = -36.0) -> Verifier:
    """P(correct) = sigmoid(a * cosine + b): 0.5 at cosine 0.9, no calibration table."""
    model = {"kind": "logistic", "features": ["cosine"], "coef": [a], "intercept": b}
    return Verifier({"format": VERIFIER_FORMAT, "version": 1, "text_model": "all-MiniLM-L6-v2",
                     "models": {"full": model, "lexical": {**model, "features": ["length_ratio"], "coef": [0.0],
                                                           "intercept": 0.0}, "cosine": model}})


def test_shipped_verifier_is_plain_json_with_all_models() -> None:
    raw = DEFAULT_VERIFIER_PATH.read_text(encoding="utf-8")
    data = json.loads(raw)  # JSON, nothing executable
    assert data["format"] == VERIFIER_FORMAT
    assert set(data["models"]) == {"vectors", "full", "lexical", "cosine"}
    assert data["models"]["vectors"]["embedding_head"]["dim"] == 384  # all-MiniLM-L6-v2
    v = Verifier.load()
    assert v.training["command"].startswith("python -m evaluation.training.train_verifier")
    p, model = v.probability(stored="b", new="a", cosine=0.5)
    assert model == "full" and 0.0 <= p <= 1.0


def test_bad_verifier_files_are_typed_errors(tmp_path: Any) -> None:
    bad = tmp_path / "v.json"
    bad.write_text("not json")
    with pytest.raises(VerifierFormatError):
        Verifier.load(bad)
    with pytest.raises(VerifierFormatError):
        Verifier({"format": "other"})
    with pytest.raises(VerifierFormatError):
        Verifier({"format": VERIFIER_FORMAT, "version": 1,
                  "models": {"full": {"kind": "logistic", "features": ["no_such_signal"], "coef": [1], "intercept": 0}}})
    with pytest.raises(VerifierFormatError):
        Verifier({"format": VERIFIER_FORMAT, "version": 99, "models": {}})


def test_calibration_round_trip_train_save_load_same_decisions(tmp_path: Any) -> None:
    """train -> export JSON -> save -> load -> the same probabilities and decisions."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    from evaluation.training.train_verifier import export_gbdt, isotonic, raw_score

    rng = np.random.default_rng(0)
    x = rng.random((600, len(SIGNAL_NAMES)))
    y = ((x[:, 0] - 0.5 * x[:, 1] + 0.2 * rng.standard_normal(600)) > 0.3).astype(int)
    w = np.ones(600)
    model = HistGradientBoostingClassifier(max_iter=15, max_depth=3, monotonic_cst=[1] + [0] * (len(SIGNAL_NAMES) - 1),
                                           random_state=0).fit(x, y)
    raw = raw_score(model, x)
    cx, cy = isotonic(raw, y, w)
    spec = export_gbdt(model, SIGNAL_NAMES)
    spec["calibration"] = {"x": cx.tolist(), "y": cy.tolist()}
    v = Verifier({"format": VERIFIER_FORMAT, "version": 1, "models": {"full": spec}})
    path = tmp_path / "verifier.json"
    v.save(path)
    loaded = Verifier.load(path)
    p_loaded = loaded.models["full"].probability(x)
    np.testing.assert_allclose(loaded.models["full"].scorer.raw(x), raw, atol=1e-9)
    np.testing.assert_allclose(p_loaded, np.interp(raw, cx, cy), atol=1e-9)
    thr = loaded.models["full"].threshold_for_precision(0.8)
    assert ((p_loaded >= thr) == (np.interp(raw, cx, cy) >= thr)).all()


# The answer-changing near-misses users reported (the suite's test-only "issue" family):
# one word swapped for its opposite, arguments swapped, a constraint changed, case or
# spacing inside quotes, code or structured data.
ANSWER_CHANGING = [
    ("What is the person on the left wearing?", "What is the person on the right wearing?"),
    ("Is the lamp above the table?", "Is the lamp below the table?"),
    ("Is the store open?", "Is the store closed?"),
    ("How do I increase the font size?", "How do I decrease the font size?"),
    ("Which is bigger, the Moon or Mercury?", "Which is smaller, the Moon or Mercury?"),
    ("What is the maximum speed on German highways?", "What is the minimum speed on German highways?"),
    ("What are the advantages of remote work?", "What are the disadvantages of remote work?"),
    ("How do I convert a list to a string in Python?", "How do I convert a string to a list in Python?"),
    ("How long is the drive from New York to Florida?", "How long is the drive from Florida to New York?"),
    ("What was the weather in London yesterday?", "What will the weather be in London tomorrow?"),
    ("How do I enable 2FA?", "How do I disable 2FA?"),
    ("Is the word 'Apple' capitalized?", "Is the word 'apple' capitalized?"),
    ("Does the regex `[A-Z]+` match 'abc'?", "Does the regex `[a-z]+` match 'abc'?"),
    ("Count the spaces in 'a b'", "Count the spaces in 'a    b'"),
    ("Is this YAML valid?\nserver:\n  host: example.org\n  port: 8080",
     "Is this YAML valid?\nserver:\n  host: example.org\n port: 8080"),
    ("Is there a cat in the picture?", "Is there no cat in the picture?"),
    ("What is 15% of 80?", "What is 25% of 80?"),
]
# (The "What is shown in this picture?" / "What does this image show?" is still
# refused: p 0.74 < 0.80; docs/contrast.md lists synonyms as the kind reused least.)
SAME_ANSWER = [
    ("What is the capital of France?", "What's the capital of France?"),
    ("What is the capital of France?", "Please tell me the capital of France."),
    ("What colour is the car?", "What color is the car?"),
    ("What is the capital of France?", "Could you tell me what the capital of France is?"),
    ("how do i reset my router", "How do I reset my router?"),
]
# A symmetric swap the judge (issue 25) refuses (P 0.71 < 0.90 when measured; the trees reused it).
SAME_ANSWER_KNOWN_MISSES = [("What do lions and tigers eat?", "What do tigers and lions eat?")]


def test_default_model_refuses_answer_changing_edits_and_reuses_rewordings(make_engine: Any) -> None:
    """At the defaults (the "full" model, min_precision), through the engine: each
    stored request alone in its scope, then its variant looked up."""
    eng = make_engine(image_encoder=None)
    assert eng.verification is not None and eng.verification.verifier.models["full"].reads_edits
    for k, (a, b) in enumerate(ANSWER_CHANGING + SAME_ANSWER):
        eng.update(CacheRequest(text=a, scope=f"s{k}"), f"answer {k}")
    for k, (a, b) in enumerate(ANSWER_CHANGING):
        found = eng.lookup_explained(CacheRequest(text=b, scope=f"s{k}"))
        assert found.hit is None, (a, b, found)
    # a refusal names what the user changed, in their words (issue 25)
    found = eng.lookup_explained(CacheRequest(text=ANSWER_CHANGING[8][1], scope="s8"))
    assert found.refused is not None and found.refused.reason == "verifier"
    assert "swapped: New York to Florida → Florida to New York" in found.refused.explain(), found.refused.explain()
    for k, (a, b) in enumerate(SAME_ANSWER, start=len(ANSWER_CHANGING)):
        hit = eng.lookup(CacheRequest(text=b, scope=f"s{k}"))
        assert hit is not None and hit.payload == f"answer {k}", (a, b)


def test_a_symmetric_swap_is_the_same_question(make_engine: Any) -> None:  # the trees; the opt-in judge refuses it
    eng = make_engine(image_encoder=None)
    for k, (a, b) in enumerate(SAME_ANSWER_KNOWN_MISSES):
        eng.update(CacheRequest(text=a, scope=f"k{k}"), f"answer {k}")
        assert eng.lookup(CacheRequest(text=b, scope=f"k{k}")) is not None, (a, b)


def test_verifier_probability_uses_the_edit_features(text_embedder: Any) -> None:
    """The same cosine and signals, another edit: the argument swap is refused."""
    v = Verifier.default()
    a, b = "How far is it from Lyon to Nice?", "How far is it from Nice to Lyon?"
    va, vb = text_embedder.embed([a, b])
    p_swap, model = v.probability(stored=a, new=b, cosine=float(va @ vb))
    assert model == "full" and p_swap < make_policy().threshold  # type: ignore[union-attr]
    rows = np.stack([v.probabilities([(a, b)], [float(va @ vb)])])
    np.testing.assert_allclose(rows.ravel(), [p_swap])


# ----------------------------------------------------------------------------- embedding head ("vectors" model)
def _unit(rng: Any, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _synthetic_pairs(n: int = 800, dim: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(signals, u, v, labels): duplicates are close in the first 4 dimensions only,
    so the head (a weighted cosine) separates them better than the plain cosine."""
    rng = np.random.default_rng(seed)
    u = _unit(rng, n, dim)
    y = (rng.random(n) < 0.4).astype(int)
    scale = np.ones((n, dim))
    scale[y == 1, :4] = 0.05
    v = u + 0.5 * rng.standard_normal((n, dim)) * scale
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    x = rng.random((n, len(SIGNAL_NAMES)))
    x[:, 0] = (u * v).sum(axis=1)
    return x, u, v, y


def test_pair_features_are_symmetric_and_hold_the_cosine() -> None:
    rng = np.random.default_rng(1)
    u, v = _unit(rng, 3, 5), _unit(rng, 3, 5)
    f = pair_features(u, v)
    assert f.shape == (3, 10)
    np.testing.assert_allclose(f, pair_features(v, u))
    np.testing.assert_allclose(f[:, 5:].sum(axis=1), (u * v).sum(axis=1))
    np.testing.assert_allclose(pair_features(u[0], v[0]), f[:1])  # one pair as 1-d vectors


def _vectors_verifier(seed: int = 0) -> tuple[Verifier, Any, Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from evaluation.training.train_verifier import (
        export_gbdt, export_head, fit_head, fit_raw, head_oof, head_score, isotonic, raw_score,
    )

    x, u, v, y = _synthetic_pairs(seed=seed)
    w = np.ones(len(y))
    f = pair_features(u, v)
    head = fit_head(f, y, w, c=1.0)
    feats = list(SIGNAL_NAMES) + ["embedding_head"]
    trees = fit_raw("gbdt", np.c_[x, head_oof(f, y, w, y, folds=3, c=1.0)], y, w, feats)
    raw = raw_score(trees, np.c_[x, head_score(head, f)])
    cx, cy = isotonic(raw, y, w)
    spec = export_gbdt(trees, feats)
    spec["embedding_head"] = export_head(head, u.shape[1])
    spec["calibration"] = {"x": cx.tolist(), "y": cy.tolist()}
    full = export_gbdt(fit_raw("gbdt", x, y, w, SIGNAL_NAMES), SIGNAL_NAMES)
    v_ = Verifier({"format": VERIFIER_FORMAT, "version": 2, "models": {"full": full, "vectors": spec}})
    return v_, head, trees, x, u, v, np.interp(raw, cx, cy)


def test_vectors_model_round_trip_train_save_load_same_decisions(tmp_path: Any) -> None:
    """head + trees: train -> export JSON -> save -> load -> same head scores, probabilities, decisions."""
    from evaluation.training.train_verifier import head_score

    ver, head, _trees, x, u, v, p_sklearn = _vectors_verifier()
    path = tmp_path / "verifier.json"
    ver.save(path)
    loaded = Verifier.load(path)
    m = loaded.models["vectors"]
    assert m.needs_vectors and loaded.head_dim() == u.shape[1]
    np.testing.assert_allclose(m.head.raw(u, v), head_score(head, pair_features(u, v)), atol=1e-9)  # type: ignore[union-attr]
    rows = np.c_[x, np.zeros((len(x), len(TEXT_FEATURE_NAMES) - len(SIGNAL_NAMES)))]  # a model's row: signals, edits
    p = m.probability(rows, u, v)
    np.testing.assert_allclose(p, p_sklearn, atol=1e-9)
    assert ((p >= 0.8) == (p_sklearn >= 0.8)).all()
    with pytest.raises(ValueError):
        m.probability(rows)  # the head needs both embeddings


def test_vectors_model_only_with_matching_embeddings() -> None:
    ver, *_rest, u, v, _p = _vectors_verifier()
    assert ver.probability(stored="a c", new="a b", cosine=0.9, vectors=(v[0], u[0]))[1] == "vectors"
    assert ver.probability(stored="a c", new="a b", cosine=0.9)[1] == "full"  # no embeddings: the texts + cosine model
    assert ver.probability(stored="a c", new="a b", cosine=0.9, vectors=(v[0][:4], u[0][:4]))[1] == "full"  # another model's dimension
    assert ver.probability(stored="a c", new="a b", cosine=0.9, vectors=(None, u[0]))[1] == "full"
    pol = VerificationPolicy(ver, cosine_matches_verifier=False)
    assert pol.decide("a b", "a c", 0.9, vectors=(u[0], v[0])).model != "vectors"  # not its text model
    pol = VerificationPolicy(ver)  # the head is opt-in
    assert not pol.wants_vectors and pol.decide("a b", "a c", 0.9, vectors=(u[0], v[0])).model == "full"
    pol = VerificationPolicy(ver, embedding_head=True)
    assert pol.wants_vectors and pol.decide("a b", "a c", 0.9, vectors=(u[0], v[0])).model == "vectors"
    assert not VerificationPolicy(_logistic_verifier(), embedding_head=True).wants_vectors


def test_head_needs_its_input_and_well_formed_arrays() -> None:
    ver, *_ = _vectors_verifier()
    spec = ver.to_json()["models"]["vectors"]
    for broken in ({**spec, "embedding_head": None},
                   {**spec, "embedding_head": {**spec["embedding_head"], "dim": 3}},
                   {**spec, "embedding_head": {**spec["embedding_head"], "input": "concat"}}):
        with pytest.raises(VerifierFormatError):
            Verifier({"format": VERIFIER_FORMAT, "version": 2, "models": {"full": spec, "vectors": broken}})


def test_stacked_out_of_fold_learns_from_the_head() -> None:
    """Nested stacking: trees on signals + out-of-fold head scores beat the plain cosine
    where the head carries the signal (the synthetic duplicates differ in 4 dimensions)."""
    from sklearn.metrics import average_precision_score

    from evaluation.training.train_verifier import stacked_out_of_fold

    x, u, v, y = _synthetic_pairs(n=600, seed=3)
    w = np.ones(len(y))
    raw, head = stacked_out_of_fold(x, pair_features(u, v), y, w, y, list(SIGNAL_NAMES) + ["embedding_head"],
                                    folds=3, inner_folds=3, c=1.0)
    assert np.isfinite(raw).all() and np.isfinite(head).all()
    assert average_precision_score(y, head) > average_precision_score(y, x[:, 0]) + 0.05
    assert average_precision_score(y, raw) > average_precision_score(y, x[:, 0]) + 0.05


# ----------------------------------------------------------------------------- answers
def test_exact_answer_match_folds_case_space_and_punctuation_only() -> None:
    assert exact_answer_match("  Yes. ", "yes") and not exact_answer_match("yes", "no")


# ----------------------------------------------------------------------------- policy
def test_static_policy_thresholds_and_no_unmeasured_claim() -> None:
    pol = VerificationPolicy(_logistic_verifier(), min_precision=0.8)
    assert pol.decide("a", "b", 0.99).accept
    d = pol.decide("a", "b", 0.85)
    assert not d.accept and d.outcome == "refused" and d.threshold == pytest.approx(0.8)
    st = pol.stats()
    assert st["mode"] == "static" and st["accepted"] == 1 and st["refused"] == 1
    assert st["false_hit_rate"] is None  # nothing measured online: no claim
    assert pol.observe("r", "x") == []


def test_error_bounded_explore_label_update_loop() -> None:
    """Refused and explored candidates are labelled by the next update; labels move the
    threshold; an entry whose reuse proved wrong is refused; estimates need labels."""
    pol = VerificationPolicy(_logistic_verifier(), max_false_hit_rate=0.05, explore_rate=1.0,
                             prior_strength=5.0, seed=1)
    assert pol.stats()["false_hit_rate"] is None
    start = pol.threshold
    assert start > 0.95  # weak prior: cautious at first
    # A candidate below the threshold is refused, then labelled for free by the update.
    d = pol.decide("q", "stored", 0.93, entry_id="e1", request_key="r1", stored_answer="42")
    assert d.outcome == "refused"
    assert pol.observe("r1", "42") == [True]
    assert pol.observe("r1", "42") == []  # consumed once
    # Many right labels in a band lower the threshold (the hit rate grows).
    for i in range(300):
        d = pol.decide("q", "s", 0.93, entry_id=f"e{i}", request_key=f"k{i}", stored_answer="A")
        if not d.accept:
            pol.observe(f"k{i}", "A")
    assert pol.threshold < start
    st = pol.stats()
    assert st["accepted"] > 0 and st["false_hit_rate"] is not None
    assert st["false_hit_rate"]["labels"] > 0 and st["false_hit_rate"]["upper_bound"] <= 0.05
    # Per entry: wrong labels make that entry refused although its band is accepted.
    p_ok = 0.93
    d = pol.decide("q", "s", p_ok, entry_id="bad", request_key="x0", stored_answer="A")
    band = pol._est.band_of(pol.verifier.probability(stored="s", new="q", cosine=p_ok)[0])
    for i in range(500):
        pol.record_label(f"ok{i}", band, right=True)
    pol.record_label("bad", band, right=False)
    assert pol.threshold < start  # one wrong label does not close the band...
    d = pol.decide("q", "s", p_ok, entry_id="bad", request_key="x1", stored_answer="A")
    assert not d.accept and pol.stats()["refused_by_entry"] == 1  # ...but closes that entry
    assert pol.decide("q", "s", p_ok, entry_id="good", request_key="x2", stored_answer="A").outcome != "refused"


def test_error_bounded_explores_would_be_hits_in_unproven_band() -> None:
    pol = VerificationPolicy(_logistic_verifier(), max_false_hit_rate=0.1, explore_rate=1.0,
                             prior_strength=5.0, seed=0)
    for i in range(400):  # p ~ 0.98: refused at first, labelled right, then accepted
        d = pol.decide("q", "s", 1.0, entry_id=f"t{i}", request_key=f"t{i}", stored_answer="A")
        if not d.accept:
            pol.observe(f"t{i}", "A")
    assert pol.decide("q", "s", 1.0, entry_id="x", request_key="x", stored_answer="A").accept
    # p ~ 0.88: accepted because the traffic-weighted bound holds, not proven on its own
    outcomes = {pol.decide("q", "s", 0.95, entry_id=f"m{i}", request_key=f"m{i}", stored_answer="A").outcome
                for i in range(3)}
    assert "explored" in outcomes
    st = pol.stats()
    assert st["explored"] >= 1 and st["pending_labels"] >= 1
    assert pol.observe("m0", "B") in ([False], [])  # an explored or refused one is labelled once
    assert pol.stats()["labels_wrong"] <= 1


def test_error_bounded_entry_with_proven_neighbourhood_is_accepted_below_threshold() -> None:
    pol = VerificationPolicy(_logistic_verifier(), max_false_hit_rate=0.05, explore_rate=0.0,
                             prior_strength=5.0, seed=0)
    low_band = pol._est.band_of(pol.verifier.probability(stored="s", new="q", cosine=0.80)[0])  # p ~ 0.02
    assert low_band < pol._est.accept_from
    assert not pol.decide("q", "s", 0.80, entry_id="faq", request_key="r0", stored_answer="A").accept
    for i in range(200):
        pol.record_label("faq", low_band, right=True)  # this entry's neighbours: always right
        if i % 2:
            pol.record_label(f"other{i}", low_band, right=False)  # the band as a whole: often wrong
    assert low_band < pol._est.accept_from
    d = pol.decide("q", "s", 0.80, entry_id="faq", request_key="r1", stored_answer="A")
    assert d.accept and pol.stats()["accepted_by_entry"] == 1
    assert not pol.decide("q", "s", 0.80, entry_id="other", request_key="r2", stored_answer="A").accept


def test_error_bounded_wrong_labels_raise_threshold() -> None:
    pol = VerificationPolicy(_logistic_verifier(), max_false_hit_rate=0.05, explore_rate=0.0,
                             prior_strength=5.0, seed=0)
    for i in range(300):
        pol.decide("q", "s", 0.93, entry_id=f"e{i}", request_key=f"k{i}", stored_answer="A")
        pol.observe(f"k{i}", "A")
    low = pol.threshold
    for i in range(300):
        pol.record_label(f"w{i}", pol._est.band_of(pol.verifier.probability(stored="s", new="q", cosine=0.93)[0]), right=False)
    assert pol.threshold > low


def test_pending_labels_are_bounded_and_the_oldest_counted_as_expired() -> None:
    pol = VerificationPolicy(_logistic_verifier(), max_false_hit_rate=0.05, explore_rate=0.0, max_pending=3, seed=0)
    for i in range(5):  # p ~ 0.02: refused, each awaiting its request's answer
        assert pol.decide("q", "s", 0.80, entry_id=f"e{i}", request_key=f"r{i}", stored_answer="A").outcome == "refused"
    st = pol.stats()
    assert st["pending_labels"] == 3 and st["pending_expired"] == 2
    assert pol.observe("r0", "A") == [] and pol.observe("r1", "A") == []  # pushed out, never labelled
    assert pol.observe("r4", "A") == [True]
    # A request refused again refreshes its slot instead of taking a new one.
    pol.decide("q", "s", 0.80, entry_id="e2b", request_key="r2", stored_answer="A")
    pol.decide("q", "s", 0.80, entry_id="e5", request_key="r5", stored_answer="A")
    pol.decide("q", "s", 0.80, entry_id="e6", request_key="r6", stored_answer="A")
    assert pol.observe("r3", "A") == [] and pol.observe("r2", "A") == [True, True]


def test_entry_labels_are_bounded_and_forgotten_with_the_entry() -> None:
    pol = VerificationPolicy(_logistic_verifier(), max_false_hit_rate=0.05, max_entries_tracked=2, seed=0)
    band = pol._est.band_of(pol.verifier.probability(stored="s", new="q", cosine=0.80)[0])
    pol.record_label("a", band, right=False)
    pol.record_label("b", band, right=False)
    pol.decide("q", "s", 0.80, entry_id="a", request_key="r", stored_answer="A")  # consulted, not labelled
    pol.record_label("c", band, right=False)
    assert pol.stats()["entries_with_labels"] == 2  # "a", the least recently labelled, went first
    assert pol._est.entry_view("a", band) is None and pol._est.entry_view("b", band) is not None
    pol.record_label("c", band + 1, right=True)  # a second band of the same entry: "b" goes
    pol.forget_entry("c")
    assert pol.stats()["entries_with_labels"] == 0
    assert pol.stats()["labels"] == 4  # the bands keep what the entry taught them


def test_make_policy_options() -> None:
    assert make_policy(None) is None and make_policy("off") is None
    with pytest.raises(ValueError):
        make_policy("off", max_false_hit_rate=0.05)
    with pytest.raises(ValueError):
        make_policy(123)
    pol = VerificationPolicy(_logistic_verifier())
    assert make_policy(pol) is pol
    other = make_policy(_logistic_verifier(), text_model="some/other-model")
    assert other is not None and not other.cosine_matches_verifier
    with pytest.raises(ValueError):
        VerificationPolicy(_logistic_verifier(), max_false_hit_rate=1.5)


# ----------------------------------------------------------------------------- engine hook
def req(text: str) -> CacheRequest:
    return CacheRequest(text=text, scope="m")


def test_engine_refuses_negation_and_explains_hits(make_engine: Any) -> None:
    eng = make_engine(image_encoder=None)
    eng.update(req("what is the color of the shape?"), "red")
    eng.update(req("Is there a cat in the picture?"), "yes")
    assert eng.lookup(req("Is there no cat in the picture?")) is None
    hit = eng.lookup(req("What colour is the shape?"))
    assert hit is not None and hit.payload == "red"
    assert 0.0 <= hit.scores["verifier"] <= 1.0
    assert hit.thresholds["verifier"] == pytest.approx(eng.verification.threshold)
    assert "verifier=" in hit.explain()
    st = eng.stats()
    assert st["tiers"]["L1"]["refused"] == 1 and st["tiers"]["L1"]["hit"] == 1
    assert st["verification"]["refused"] >= 1 and st["verification"]["accepted"] == 1


def test_engine_verifier_off_is_raw_cosine(make_engine: Any) -> None:
    eng = make_engine(l1_threshold=0.9, image_encoder=None, verifier="off")
    eng.update(req("Is there a cat in the picture?"), "yes")
    hit = eng.lookup(req("Is there no cat in the picture?"))  # cosine 0.94: the failure the verifier fixes
    assert hit is not None and "verifier" not in hit.scores
    assert eng.stats()["verification"] == {"mode": "off"}


def test_engine_error_bounded_explores_and_learns_from_update(make_engine: Any) -> None:
    pol = VerificationPolicy(_logistic_verifier(), max_false_hit_rate=0.1, explore_rate=1.0,
                             prior_strength=5.0, seed=0)
    for i in range(400):  # a well-proven band at p ~ 0.98 makes the aggregate bound hold
        if not pol.decide("q", "s", 1.0, entry_id=f"t{i}", request_key=f"t{i}", stored_answer="A").accept:
            pol.observe(f"t{i}", "A")
    pol.reset_stats()
    eng = make_engine(image_encoder=None, verifier=pol)
    eng.update(req("what is the color of the shape?"), "red")
    r = req("what color is the shape?")
    assert eng.lookup(r) is None  # would-be hit explored: answered miss on purpose
    st = eng.stats()
    assert st["verification"]["explored"] == 1 and st["tiers"]["L1"]["refused"] == 1
    eng.update(r, "red")  # the application stores the fresh answer: a label
    st = eng.stats()["verification"]
    assert st["labels"] == 1 and st["labels_wrong"] == 0 and st["explored_labels"] == 1


def test_engine_without_stored_prompts_uses_cosine_model(make_engine: Any, caplog: Any) -> None:
    eng = make_engine(image_encoder=None, writes=WriteOptions(store_prompts=False))
    eng.update(req("what is the color of the shape?"), "red")
    with caplog.at_level(logging.WARNING, logger="mlc_integrations.verify"):
        hit = eng.lookup(req("what color is the shape?"))
    d = next(iter(req_decisions(eng, "what color is the shape?").values()))
    assert d.model == "cosine"
    assert hit is None or hit.scores["verifier"] >= hit.thresholds["verifier"]
    assert any("store_prompts=False" in r.message for r in caplog.records) or eng.verification._warned


def _minilm_vectors_verifier(head_weight: float) -> Verifier:
    """A "vectors" model over cosine + embedding_head for 384-d embeddings whose head is
    a plain weighted cosine (u * v coefficients = head_weight)."""
    dim = 384
    head = {"kind": "logistic", "input": "absdiff_product", "dim": dim, "coef": [0.0] * dim + [head_weight] * dim,
            "intercept": 0.0, "mean": [0.0] * (2 * dim), "scale": [1.0] * (2 * dim)}
    base = _logistic_verifier().to_json()
    base["version"] = 2
    base["models"]["vectors"] = {"kind": "logistic", "features": ["cosine", "embedding_head"], "coef": [40.0, 1.0],
                                 "intercept": -36.0, "embedding_head": head}
    return Verifier(base)


def test_engine_hands_both_embeddings_to_the_vectors_model(make_engine: Any) -> None:
    """The engine reads an L1 candidate's stored vector for a verifier with a "vectors"
    model (the shipped one has it); without one it never reads it and uses "full"."""
    assert not make_engine(image_encoder=None, verifier=_minilm_vectors_verifier(40.0)).verification.wants_vectors
    eng = make_engine(image_encoder=None, verifier=VerificationPolicy(_minilm_vectors_verifier(40.0), embedding_head=True))
    assert eng.verification.wants_vectors
    eng.update(req("what is the color of the shape?"), "red")
    d = next(iter(req_decisions(eng, "what color is the shape?").values()))
    # logit = 40 * cosine + head (= 40 * cosine) - 36 >= 28 at the retrieval threshold 0.8
    assert d.model == "vectors" and d.probability > 0.99
    eng2 = make_engine(image_encoder=None, verifier=_logistic_verifier())
    assert not eng2.verification.wants_vectors
    eng2.update(req("what is the color of the shape?"), "red")
    assert next(iter(req_decisions(eng2, "what color is the shape?").values())).model == "full"
    eng3 = make_engine(image_encoder=None, verifier=VerifierOptions(embedding_head=True))  # the shipped verifier, head on
    eng3.update(req("what is the color of the shape?"), "red")
    eng3.update(req("Is there a cat in the picture?"), "yes")
    d = next(iter(req_decisions(eng3, "what color is the shape?").values()))
    assert d.model == "vectors" and d.accept
    d = next(iter(req_decisions(eng3, "Is there no cat in the picture?").values()))
    assert d.model == "vectors" and not d.accept
    # a caller-supplied embedding: the cosine is used, the head (trained on MiniLM) is not
    r = CacheRequest(text="what color is the shape?", scope="m",
                     text_embedding=eng3.text_embedder.embed(["what color is the shape?"])[0].tolist())
    assert next(iter(eng3.lookup_explained(r).verdicts.values())).model == "full"


def req_decisions(eng: Any, text: str) -> dict[str, Any]:
    return eng.lookup_explained(req(text)).verdicts


def test_default_verifier_keeps_common_paraphrases(make_engine: Any) -> None:
    """The default path (texts + cosine) reuses everyday rewordings, and still refuses
    a negation and a changed number."""
    eng = make_engine(image_encoder=None)
    eng.update(req("What is the capital of France?"), "Paris")
    eng.update(req("What is the price of the shape in this picture?"), "$2.50")
    eng.update(req("Is there a cat in the picture?"), "yes")
    eng.update(req("What is 15% of 80?"), "12")
    assert eng.lookup(req("Which city is the capital of France?")).payload == "Paris"
    assert eng.lookup(req("How much does the shape in this picture cost?")).payload == "$2.50"
    assert eng.lookup(req("Is there no cat in the picture?")) is None
    assert eng.lookup(req("What is 25% of 80?")) is None


def test_identical_request_text_is_not_second_guessed() -> None:
    """An L2 candidate with the same question (a near-identical picture) is judged by the
    image threshold; no training pair is identical, so the models are not asked."""
    v = Verifier.default()
    q = "What shape is in the image?"
    assert v.probability(stored=q + "  ", new=q, cosine=0.999) == (1.0, "full")
    assert v.probability(stored=q, new=q, cosine=None) == (1.0, "lexical")
    assert v.probabilities([(q, q), (q, "What colour is the shape?")], [1.0, 0.7]).tolist()[0] == 1.0
    assert v.probability(stored="what shape is in the image?", new="What shape is in the image?", cosine=0.99)[0] < 1.0  # case: L1 judges


def test_text_features_do_not_depend_on_the_string_hash_seed() -> None:
    """Training is reproducible only if a pair's features are bit-identical in every
    process (set iteration order follows PYTHONHASHSEED; sums once depended on it)."""
    import os
    import subprocess
    import sys

    code = ("import hashlib; from mlc_integrations.verify import WordWeights, text_features\n"
            "w = WordWeights({'capital': 3, 'france': 2, 'route': 5}, 40)\n"
            "pairs = [('What is the capital of France?', 'Which city is the capital city of France, please?'),\n"
            "         ('Is the route from Lyon to Nice long?', 'Is the trip from Nice to Lyon by train long and slow?')]\n"
            "rows = b''.join(text_features(stored=a, new=b, cosine=0.9, weights=w).tobytes() for a, b in pairs)\n"
            "print(hashlib.sha256(rows).hexdigest())")
    out = set()
    for seed in ("0", "1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               check=True).stdout.strip())
    assert len(out) == 1 and len(next(iter(out))) == 64


# ----------------------------------------------------------------------------- argument order
def test_every_pair_function_takes_stored_and_new_by_keyword() -> None:
    """One convention, (stored, new), and keyword-only: a positional call from the old
    (new, stored) order fails instead of silently swapping the sides."""
    import inspect

    from mlc_integrations.verify.explain import difference, refusal_reason
    from mlc_integrations.verify.text.edits import EditAnalyser, analyse, edit_features
    from mlc_integrations.verify.text.judge import PairJudge

    for fn in (Verifier.probability, PairJudge.probability, PairJudge.features, text_features, extract_signals,
               analyse, edit_features, EditAnalyser.analyse, difference, refusal_reason):
        params = inspect.signature(fn).parameters
        assert params["stored"].kind is params["new"].kind is inspect.Parameter.KEYWORD_ONLY, fn
        names = [n for n in params if n in ("stored", "new")]
        assert names == ["stored", "new"], fn


def test_a_swapped_positional_call_is_refused() -> None:
    from mlc_integrations.verify.text.edits import analyse

    v = Verifier.default()
    with pytest.raises(TypeError):
        v.probability("new text", "stored text", 0.9)  # type: ignore[misc]
    with pytest.raises(TypeError):
        text_features("new text", "stored text", 0.9)  # type: ignore[misc]
    with pytest.raises(TypeError):
        analyse("stored text", "new text")  # type: ignore[misc]


def test_the_sides_are_not_interchangeable() -> None:
    """Why the order matters: an added constraint read the other way is a dropped one."""
    from mlc_integrations.verify.text.edits import analyse

    a, b = "Easy pasta recipe", "Easy pasta recipe for beginners"
    assert analyse(stored=a, new=b).what_changed() == "added: for beginners"
    assert analyse(stored=b, new=a).what_changed() == "dropped: for beginners"


def test_the_signals_are_symmetric_so_their_order_cannot_matter() -> None:
    pairs = [("How far is it from Lyon to Nice?", "How far is it from Nice to Lyon by train?"),
             ("Is there a cat?", "Is there no cat in the picture?"), ("What is 15% of 80?", "What is 25% of 90?")]
    for a, b in pairs:
        assert extract_signals(stored=a, new=b, cosine=0.9) == extract_signals(stored=b, new=a, cosine=0.9)


def test_batch_and_single_probabilities_read_the_pair_the_same_way() -> None:
    v = Verifier.default()
    a, b = "Best pasta recipe", "Best pasta recipe for beginners"
    one, _ = v.probability(stored=a, new=b, cosine=0.9)
    assert v.probabilities([(a, b)], [0.9])[0] == pytest.approx(one)


# ----------------------------------------------------------------------------- the engine's text model
class _CountingEmbedder:
    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Any) -> np.ndarray:
        self.calls += 1
        return np.tile(np.asarray([[0.6, 0.8]], dtype=np.float32), (len(texts), 1))


def test_the_policy_uses_the_text_model_it_is_given() -> None:
    emb = _CountingEmbedder()
    pol = make_policy(text_embedder=emb)
    assert pol is not None and pol.text_embedder() is emb
    assert pol._text_cosine("a", "b") == pytest.approx(1.0) and emb.calls == 1


def test_a_text_model_passed_as_a_function_is_fetched_only_when_needed() -> None:
    emb = _CountingEmbedder()
    asked: list[int] = []
    pol = make_policy(text_embedder=lambda: asked.append(1) or emb)
    assert pol is not None and not asked
    assert pol._text_cosine("a", "b") == pytest.approx(1.0) and asked == [1]


def test_without_one_the_policy_shares_the_named_models_instance() -> None:
    """No second copy: the engine's TextEmbedder.shared instance of the same model."""
    from mlc_integrations.embed.models import TextEmbedder

    pol = make_policy(text_model=None)
    assert pol is not None and pol.text_embedder() is TextEmbedder.shared(None)


def test_the_judge_reads_the_cosine_of_the_engines_text_model() -> None:
    """An L2 candidate (no text-model cosine): the judge gets the given model's cosine."""
    from mlc_integrations.verify.text.judge import PairJudge

    class _Judge(PairJudge):
        def __init__(self) -> None:  # no model files: records what it is asked
            self.threshold, self.seen, self.kind, self.calibration = 0.5, [], "lora", None

        def probability(self, *, stored: str, new: str, cosine: float) -> float:
            self.seen.append((stored, new, cosine))
            return 0.9

    emb, judge = _CountingEmbedder(), _Judge()
    pol = VerificationPolicy(Verifier.default(), judge=judge, text_embedder=emb)
    d = pol.decide("What colour is the car?", "What color is the car?", None)
    assert d.model == "judge" and judge.seen == [("What color is the car?", "What colour is the car?", pytest.approx(1.0))]
    assert emb.calls == 1
