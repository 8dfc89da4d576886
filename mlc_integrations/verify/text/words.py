"""The closed word classes of English the text verifier reads: each defined once.

Open classes (which words name a colour, a shape, a value with an antonym) come from
the WordNet lexicon instead (:meth:`.lexicon.Lexicon.is_attribute`), never from a list.

The signals (:mod:`.signals`), the tokenizer and edit analysis (:mod:`.tokens`,
:mod:`.edits`) and the refusal text (:mod:`..explain`) import these sets; no other
module spells a copy (``tests/unit/test_words.py`` checks it). Closed classes are
grammar, not content: WordNet (:mod:`.lexicon`) does not cover them.

All words are lower case; contractions appear expanded ("can't" -> "can" "not") except
in :data:`UNMARKED_NEGATIONS`, the same contractions typed without an apostrophe.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# ---------------------------------------------------------------------------- negation
NEGATIONS = _words("not no never none nobody nothing neither nor nowhere without cannot")
# Negated contractions typed without an apostrophe ("dont", "isnt"): negations too.
UNMARKED_NEGATIONS = _words("dont doesnt didnt isnt arent wasnt werent cant couldnt wont wouldnt shouldnt "
                            "havent hasnt hadnt mustnt neednt aint")
# The base of a negated contraction that is not its spelling: "ca(n't)" -> "can", "wo(n't)" -> "will".
NEGATED_BASES = {"ca": "can", "wo": "will", "sha": "shall", "ai": "is"}
# Enclitics and the word they stand for ("'s" is handled apart: "is" or a possessive).
CONTRACTIONS = {"n't": "not", "'re": "are", "'ve": "have", "'ll": "will", "'m": "am", "'d": "would"}
# After these words "'s" is "is" (what's, it's, there's); elsewhere a possessive (cat's).
S_IS_AFTER = _words("it he she that there here what who where how when why which this")

# ---------------------------------------------------------------------------- function words
# Question words, each with the question it asks ("which" asks what "what" asks).
WH = {"what": "what", "which": "what", "who": "who", "whom": "who", "whose": "whose", "why": "why",
      "how": "how", "when": "when", "where": "where", "whether": "whether"}
WH_WORDS = frozenset(WH)
MODALS = _words("can could may might must shall should will would ought")
QUANTIFIERS = _words("all some any every each both either most many much few several enough whole "
                     "everything everyone everybody something someone anything anyone")
DEGREE = _words("more most less least fewer")
PREPOSITIONS = _words(
    "about above across after against along among around at before behind below beneath beside between "
    "beyond by down during except for from in inside into near of off on onto out outside over past since "
    "through throughout till to toward towards under underneath until up upon via with within")
PRONOUNS = _words("i me my mine myself you your yours yourself yourselves he him his himself she her hers "
                  "herself it its itself we us our ours ourselves they them their theirs themselves")
PAST_AUX = _words("was were did had")
PRESENT_AUX = _words("is are am do does has have")
FUTURE_AUX = _words("will shall")  # also modals: "will" counts for both
POLITENESS = _words("please kindly thanks thank hi hello hey cheers")
OTHER_FUNCTION = _words(
    "a an the this that these those be been being done having there here as than so if then also just "
    "very really quite rather too such own other another only even still actually basically simply get got "
    "getting 's")
COORDINATORS = _words("and or nor vs versus plus & , / ;")  # "A and B" = "B and A"
REQUEST_VERBS = _words("tell show give let help explain")  # "tell me", "let me know"
FUNCTION_WORDS = (NEGATIONS | QUANTIFIERS | DEGREE | MODALS | WH_WORDS | PREPOSITIONS
                  | PRONOUNS | PAST_AUX | PRESENT_AUX | POLITENESS | OTHER_FUNCTION | COORDINATORS)

# ---------------------------------------------------------------------------- numbers, units, time
NUMBER_WORDS: dict[str, float] = {w: float(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
NUMBER_WORDS.update({
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
    "hundred": 100, "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "dozen": 12,
    "half": 0.5, "twice": 2, "double": 2, "triple": 3, "first": 1, "second": 2, "third": 3, "fourth": 4,
    "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10})
# Also ordinary words ("which one", "a second opinion", "half the time", "a double room"):
# numbers only when the other request has a number too.
AMBIGUOUS_NUMBERS = _words("one second half double")

UNITS = _words(
    "% $ € £ ¥ ° percent percentage dollar euro pound rupee yen yuan bitcoin "
    "kg g mg lb lbs oz ton tonne gram kilogram kilo ounce "
    "km m cm mm mi mile meter metre kilometer kilometre inch foot feet ft yard "
    "l ml liter litre gallon cup tablespoon teaspoon "
    "ms sec second minute min hour hr day week month year decade century "
    "kb mb gb tb byte bit kbps mbps gbps hz khz mhz ghz w kw watt volt v amp mah "
    "celsius fahrenheit kelvin calorie kcal mph kph rpm pixel px mp k")
MONTHS = _words("january february march april may june july august september october november december "
                "jan feb mar apr jun jul aug sep sept oct nov dec")
WEEKDAYS = _words("monday tuesday wednesday thursday friday saturday sunday")
RELATIVE_TIME = _words("today tomorrow yesterday tonight now currently before after ago next last previous "
                       "past future recent recently latest earlier later morning evening night weekend")

# ---------------------------------------------------------------------------- the signals' stop words
# Words the signals never count as content: the function words above that the signals'
# tokenizer sees, plus request verbs and vague nouns ("thing", "way") and the pieces of
# contractions it splits ("s", "ll").
_SIGNAL_STOPWORDS_OTHER = _words(
    "a an the and or but if then so than that this these those there here of to in at by "
    "for with from into onto about as is are was were be been being am do does did doing done "
    "have has had having get gets got getting also just very really any some all each every such own "
    "other another only even still too quite rather via per vs versus etc ever one ones "
    "someone something anyone anything way ways thing things lot lots please tell know "
    "like make makes made s t d ll re ve")
STOPWORDS = _SIGNAL_STOPWORDS_OTHER | WH_WORDS | MODALS | PRONOUNS
