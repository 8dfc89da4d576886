"""03 - A multi-turn assistant about one picture: where context makes reuse right, and
where it must be refused.

What it shows
    User A sends a picture and asks three questions in one conversation, including a
    follow-up that only makes sense in context ("Answer again in one word, but in
    French."). Then other users talk about the same picture through the same cached
    LangChain chat model:

    * B repeats A's conversation: every turn is reused (L0.5). The earlier turns are
      the same, so A's answers are right for B too.
    * C opens with a paraphrase of A's first question: reused (L1). C's later turns are
      recomputed: the cache compares earlier turns exactly, and C's first turn differs
      from A's in wording. Conservative: it costs model calls, never a wrong answer.
    * D opens with another question, then sends A's follow-up word for word, about
      the same picture. A context-blind cache would return A's "bleu"; the right answer
      here is "cercle". The cache refuses, because the earlier turns differ.
    * E asks A's first question about a different picture: a miss.

    Every answer is checked against the picture's ground truth, and each step shows
    what a cache that ignored context would have returned.

Run it
    ./dev python cookbook/03_multiturn_picture.py [--picture-id N]

Real provider (optional; the default is an offline stand-in model, labelled as such)
    MLC_COOKBOOK_PROVIDER=openai  -> langchain_openai.ChatOpenAI   (pip install langchain-openai; OPENAI_API_KEY)
    MLC_COOKBOOK_PROVIDER=ollama  -> langchain_ollama.ChatOllama   (pip install langchain-ollama; a running Ollama)
    MLC_COOKBOOK_MODEL=<name> picks a vision model. A real model words its answers
    its own way, so the ground-truth check is exact only for the stand-in.
"""

from __future__ import annotations

import argparse
from typing import Any, Optional, Sequence

import _common
from _common import Picture, langchain_chat_model, langchain_image_block, picture, picture_by_id, tier_of, true_answer
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from mlc_integrations import MultimodalSemanticCache
from mlc_integrations.verify import normalize_answer

SYSTEM = "You answer questions about the user's picture in one word."
FRENCH_AGAIN = "Answer again in one word, but in French."


def conversations(p: Picture, other: Picture) -> list[tuple[str, Picture, list[str], str]]:
    """(user, picture, questions, what the user's conversation shows)."""
    return [
        ("A", p, ["What color is the shape?", FRENCH_AGAIN, "What shape is in the image?"],
         "first user: every turn is new"),
        ("B", p, ["What color is the shape?", FRENCH_AGAIN, "What shape is in the image?"],
         "same conversation: reuse is right (same earlier turns)"),
        ("C", p, ["What's the color of the shape?", FRENCH_AGAIN, "What shape is in the image?"],
         "paraphrased opening: reused; later turns recomputed (earlier turns differ)"),
        ("D", p, ["What shape is in the image?", FRENCH_AGAIN],
         "same follow-up text after another question: reuse must be refused"),
        ("E", other, ["What color is the shape?"], "same question, different picture: a miss"),
    ]


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--picture-id", type=int, default=None,
                        help="talk about this easy-vqa test picture (default: a blue circle the stand-in reads "
                             "right; a few it misreads show up as wrong answers, cache or not)")
    args = parser.parse_args(argv)
    clip = _common.introduce("03 multi-turn assistant about one picture")

    cache = MultimodalSemanticCache(persist_directory=None, image_encoder=clip)
    model = langchain_chat_model(cache=cache)
    main_picture = picture("blue", "circle") if args.picture_id is None else picture_by_id(args.picture_id)
    red_triangle = picture("red", "triangle")
    # (picture id, normalized question) -> first answer given: what a cache that compared
    # only the question and the picture, not the conversation, would return.
    context_blind: dict[tuple[int, str], str] = {}
    steps: list[dict[str, Any]] = []
    for user, pic, questions, shows in conversations(main_picture, red_triangle):
        print(f"user {user} about a {pic.name}: {shows}")
        messages: list[BaseMessage] = [SystemMessage(SYSTEM)]
        previous_truth: Optional[str] = None
        for turn, question in enumerate(questions, 1):
            content: Any = question
            if turn == 1:
                content = [{"type": "text", "text": question}, langchain_image_block(pic)]
            messages.append(HumanMessage(content=content))
            calls_before = _common.model_calls(model, 0)
            reply = model.invoke(messages)
            hit = cache.last_hit
            messages.append(reply)
            truth = true_answer(question, pic.color, pic.shape, previous=previous_truth)
            previous_truth = truth
            key = (pic.image_id, normalize_answer(question))
            blind = context_blind.get(key)
            context_blind.setdefault(key, str(reply.content))
            step = {
                "user": user, "turn": turn, "question": question, "picture": pic.name,
                "cache": tier_of(hit), "why": hit.explain() if hit else "",
                "answer": str(reply.content), "truth": truth,
                "correct": normalize_answer(str(reply.content)).strip(".") == truth,
                "model_calls": _common.model_calls(model, calls_before + (hit is None)) - calls_before,
                "context_blind_answer": blind,
            }
            steps.append(step)
            outcome = "MISS, model called" if hit is None else f"CACHE HIT {step['why']}"
            note = ""
            if blind is not None and hit is None:
                verdict = "would be WRONG" if normalize_answer(blind).strip(".") != truth else "would be right"
                note = f"  [context-blind cache: {blind!r}, {verdict}]"
            print(f"  turn {turn}: {question!r:44} {outcome:45} -> {step['answer']!r} "
                  f"(truth {truth!r}{', ok' if step['correct'] else ', WRONG'}){note}")
        print()

    # Refusals that mattered: a cache blind to context would have answered wrongly where
    # the model, asked in context, answered right (on a picture the model misreads, both
    # can be wrong; such a refusal saves nothing and is not counted).
    refused_wrong = [s for s in steps if s["cache"] == "miss" and s["context_blind_answer"] is not None
                     and normalize_answer(s["context_blind_answer"]).strip(".") != s["truth"] and s["correct"]]
    by_user: dict[str, dict[str, Any]] = {}
    for s in steps:
        u = by_user.setdefault(s["user"], {"turns": 0, "hits": 0, "model_calls": 0, "tiers": []})
        u["turns"] += 1
        u["hits"] += s["cache"] != "miss"
        u["model_calls"] += s["model_calls"]
        u["tiers"].append(s["cache"])
    summary = {
        "example": "03_multiturn_picture",
        "provider": _common.provider(),
        "l2": cache.stats()["config"]["tiers"]["L2"],
        "steps": steps,
        "by_user": by_user,
        "model_calls": sum(s["model_calls"] for s in steps),
        "turns": len(steps),
        "wrong_answers": sum(not s["correct"] for s in steps),
        "refused_where_context_blind_reuse_is_wrong": len(refused_wrong),
    }
    print("summary: " + "; ".join(f"{u}: {v['hits']}/{v['turns']} turns from cache {v['tiers']}" for u, v in by_user.items()))
    print(f"         {summary['model_calls']} model calls for {summary['turns']} turns; wrong answers: "
          f"{summary['wrong_answers']}; refused where a context-blind cache would have been wrong and the model was right: "
          f"{summary['refused_where_context_blind_reuse_is_wrong']}")
    cache.close()
    return summary


if __name__ == "__main__":
    main()
