"""Wordings of the scene questions (:mod:`.scene_questions`): templates per operation,
relation and extreme phrases. Pure data.

{a}, {b}: object descriptions; {pa}, {pb}: their plurals; {v}: a value; {r}: a
relation phrase; {e}: an extreme phrase. The last ``HELD_OUT`` entries of every list
(templates and phrases) are used only in the test split.
"""

from __future__ import annotations

HELD_OUT = 2
REL_WORDS = {
    "left": ("to the left of", "left of", "on the left side of", "further left than", "on the left of",
             "more to the left than"),
    "right": ("to the right of", "right of", "on the right side of", "further right than", "on the right of",
              "more to the right than"),
    "above": ("above", "higher than", "higher up than", "over", "further up than", "at a higher position than"),
    "below": ("below", "lower than", "lower down than", "beneath", "further down than", "at a lower position than"),
    "front": ("in front of", "nearer to the camera than", "in the foreground relative to", "closer to the camera than",
              "nearer to the viewer than", "closer to the viewer than"),
    "behind": ("behind", "farther from the camera than", "in the background relative to", "further from the camera than",
               "farther from the viewer than", "further back than"),
}
EXT_WORDS = {  # follow "the object ..."
    "leftmost": ("on the far left", "furthest to the left", "that is leftmost", "in the leftmost position"),
    "rightmost": ("on the far right", "furthest to the right", "that is rightmost", "in the rightmost position"),
    "topmost": ("at the very top", "highest up", "that is topmost", "in the highest position"),
    "bottommost": ("at the very bottom", "lowest down", "that is bottommost", "in the lowest position"),
    "largest": ("of the greatest size", "that is biggest", "that is largest", "with the largest size"),
    "smallest": ("of the least size", "that is tiniest", "that is smallest", "with the smallest size"),
}
TEMPLATES: dict[str, tuple[str, ...]] = {
    "exist": ("is there a {a}?", "is there a {a} in the picture?", "does the image contain a {a}?",
              "can you see a {a}?", "is a {a} present?", "do you see any {a} in this scene?",
              "is there any {a} in the image?"),
    "exist_not": ("is there no {a}?", "is there no {a} in the picture?", "does the image not contain a {a}?",
                  "is it true that there is no {a}?", "is the picture without a {a}?", "is a {a} absent from the image?"),
    "query:color": ("what color is the {a}?", "what is the color of the {a}?", "which color does the {a} have?",
                    "what colour is the {a}?", "the {a} is what color?", "tell me the color of the {a}."),
    "query:shape": ("what shape is the {a}?", "what is the shape of the {a}?", "which shape does the {a} have?",
                    "what kind of shape is the {a}?", "the {a} has what shape?", "tell me the shape of the {a}."),
    "query:size": ("what size is the {a}?", "how big is the {a}?", "is the {a} small, medium or large?",
                   "what is the size of the {a}?", "how large is the {a}?", "tell me the size of the {a}."),
    "verify:color": ("is the {a} {v}?", "is the color of the {a} {v}?", "does the {a} have a {v} color?",
                     "is the {a} colored {v}?", "would you say the {a} is {v}?", "is the {a} painted {v}?"),
    "relate": ("is the {a} {r} the {b}?", "is the {a} located {r} the {b}?", "would you say the {a} is {r} the {b}?",
               "is it true that the {a} is {r} the {b}?", "does the {a} sit {r} the {b}?", "is the {a} positioned {r} the {b}?"),
    "relate_not": ("is the {a} not {r} the {b}?", "is it not the case that the {a} is {r} the {b}?",
                   "is it false that the {a} is {r} the {b}?", "is the {a} not located {r} the {b}?"),
    "choose:left": ("which is further left, the {a} or the {b}?", "which one is more to the left: the {a} or the {b}?",
                    "what is further to the left, the {a} or the {b}?", "of the {a} and the {b}, which is on the left?"),
    "choose:right": ("which is further right, the {a} or the {b}?", "which one is more to the right: the {a} or the {b}?",
                     "what is further to the right, the {a} or the {b}?", "of the {a} and the {b}, which is on the right?"),
    "count": ("how many {pa} are there?", "how many {pa} are in the picture?", "what is the number of {pa}?",
              "count the {pa}.", "how many {pa} can you see?", "what number of {pa} does the image show?"),
    "count_not": ("how many objects are not {v}?", "how many shapes are not {v}?",
                  "what is the number of objects that are not {v}?", "count the objects that are not {v}.",
                  "how many of the objects are not {v}?", "how many things in the image are not {v}?"),
    "more": ("are there more {pa} than {pb}?", "is the number of {pa} greater than the number of {pb}?",
             "do {pa} outnumber {pb}?", "are {pa} more numerous than {pb}?", "does the image show more {pa} than {pb}?"),
    "fewer": ("are there fewer {pa} than {pb}?", "is the number of {pa} smaller than the number of {pb}?",
              "are {pa} outnumbered by {pb}?", "are {pa} less numerous than {pb}?", "does the image show fewer {pa} than {pb}?"),
    "bigger": ("is the {a} bigger than the {b}?", "is the {a} larger than the {b}?", "is the {a} of greater size than the {b}?",
               "is the {a} larger in size than the {b}?", "does the {a} look bigger than the {b}?", "is the {a} the bigger one compared to the {b}?"),
    "smaller": ("is the {a} smaller than the {b}?", "is the {a} tinier than the {b}?", "is the {a} of lesser size than the {b}?",
                "is the {a} smaller in size than the {b}?", "does the {a} look smaller than the {b}?", "is the {a} the smaller one compared to the {b}?"),
    "same_color": ("are the {a} and the {b} the same color?", "do the {a} and the {b} have the same color?",
                   "is the {a} the same color as the {b}?", "are the {a} and the {b} of equal color?",
                   "do the {a} and the {b} share a color?", "is the {b} colored like the {a}?"),
    "superlative:color": ("what color is the object {e}?", "what is the color of the shape {e}?",
                          "which color does the object {e} have?", "what colour is the object {e}?",
                          "the object {e} is what color?", "tell me the color of the object {e}."),
    "superlative:shape": ("what shape is the object {e}?", "what is the shape of the object {e}?",
                          "which shape does the object {e} have?", "what kind of shape is the object {e}?",
                          "the object {e} has what shape?", "tell me the shape of the object {e}."),
    "and": ("is there a {a} and a {b}?", "are there both a {a} and a {b}?", "does the picture contain a {a} as well as a {b}?",
            "is there a {a} and also a {b}?", "can you see a {a} and also a {b}?", "does the image hold both a {a} and a {b}?"),
    "or": ("is there a {a} or a {b}?", "is there either a {a} or a {b}?", "does the picture contain a {a} or a {b}?",
           "is there at least one of a {a} or a {b}?", "can you see a {a} or a {b}?", "does the image hold a {a} or a {b}?"),
}
