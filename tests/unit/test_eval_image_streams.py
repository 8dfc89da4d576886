"""The real-picture evaluation pieces: threshold rule, calibration split, video frames
and the classifier backend's truth."""

from __future__ import annotations

import math


from evaluation.harness.image_streams import video_frames
from evaluation.studies.photos import RELATED, choose_threshold, related_pairs, split
from evaluation.paths import video_source


def test_threshold_is_the_strictest_that_keeps_the_target_reuse() -> None:
    own = [0.99] * 90 + [0.95] * 8 + [0.70, float("nan")]  # nan: another picture matched better
    assert choose_threshold(own, [0.30, 0.41], target=0.97) == 0.95
    assert choose_threshold(own, [0.30, 0.41], target=0.90) == 0.99


def test_threshold_never_drops_to_a_different_picture() -> None:
    own = [0.5] * 100
    assert math.isclose(choose_threshold(own, [0.80], target=0.97, margin=0.02), 0.82)


def test_split_keeps_each_related_group_on_one_side() -> None:
    names = sorted({n for pairs in RELATED.values() for p in pairs for n in p} | {f"sk:x{i}" for i in range(20)})
    cal, held = split(names, seed=3)
    assert sorted(cal + held) == names and not set(cal) & set(held)
    for pair in related_pairs(names):
        a, b = sorted(pair)
        assert (a in cal) == (b in cal), pair
    assert abs(len(cal) - len(held)) <= 5  # the chessboard group (5) is the largest


def test_video_frames_decode_in_order_from_the_full_video_or_the_excerpt() -> None:
    path, step = video_source("tree.avi")  # the shared data set's, or the checkout's excerpt
    every = video_frames(path, stride=1)
    some = video_frames(path, stride=5, max_frames=3)
    assert len(every) >= 11 and len(some) == 3
    assert [f.tobytes() for f in some] == [every[i].tobytes() for i in (0, 5, 10)]
    assert some[0].mode == "RGB" and some[0].size in ((320, 240), (160, 120))  # the full video or the excerpt


def test_a_bare_video_name_counts_its_stride_in_original_frames() -> None:
    path, step = video_source("vtest.avi")
    assert [f.tobytes() for f in video_frames("vtest.avi", stride=2 * step, max_frames=2)] == \
        [f.tobytes() for f in video_frames(path, stride=2, max_frames=2)]


def test_the_checkout_carries_excerpts_of_both_videos() -> None:
    from evaluation.paths import REPO_DATA

    for name in ("vtest.avi", "tree.avi"):
        assert len(video_frames(REPO_DATA / "video" / name, stride=1)) >= 68


def test_classifier_truth_is_what_the_backend_answers_for_the_bytes_sent() -> None:
    from evaluation.sources import imageops
    from evaluation.harness.backends import ImageNetClassifierChat
    from evaluation.harness.image_streams import FRAME_QUESTION, classifier_truths
    from evaluation.harness.runner import to_messages
    from evaluation.harness.workloads import WorkItem

    frame = video_frames("vtest.avi", stride=1, max_frames=1)[0]
    data = imageops.jpeg_bytes(frame, 90)
    (truth,) = classifier_truths([data])
    backend = ImageNetClassifierChat()
    answer = backend.invoke(to_messages(WorkItem(FRAME_QUESTION, truth, "frame", data, "image/jpeg"))).content
    assert answer == truth and backend.calls == 1
