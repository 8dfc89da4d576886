"""Template families of the contrast/paraphrase suite (see :mod:`.contrast_suite`).

A family is one sentence frame (or a few of one shape) with slots. An answer-changing
family differs in one *variant* ({X} is x on one side, y on the other: "left"/"right",
"all"/"some", an antonym pair from WordNet) or in the order of two slots ({A}/{B});
a paraphrase family has two frames that ask the same thing. Slot pools are plain
topic lists; word pairs that carry the contrast come from the lexicon where WordNet
has them (``"lex:..."`` pools, resolved in :mod:`.contrast_suite`).

Every family is in one split: test families use frames the train families never use,
and lexicon pools are split by word pair too, so the test split measures templates and
words the model has not seen. The issue's literal examples are a test-only family of
their own (``ISSUE_EXAMPLES``); their word pairs never appear in train
(``ISSUE_WORD_PAIRS``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

TOPICS = ["photosynthesis", "inflation", "the French Revolution", "black holes", "machine learning",
          "the water cycle", "compound interest", "climate change", "blockchain", "vaccines", "the stock market",
          "recursion", "plate tectonics", "the immune system", "supply and demand", "quantum computing",
          "DNA replication", "the Roman Empire", "electric cars", "the theory of relativity", "volcanoes",
          "the Cold War", "neural networks", "the greenhouse effect", "cryptocurrency", "the human heart"]
OBJECTS = ["cup", "book", "lamp", "chair", "bottle", "plant", "laptop", "box", "ball", "phone", "bag", "clock",
           "vase", "hat", "shoe", "bicycle", "car", "dog", "cat", "tree", "window", "table", "door", "painting"]
PLURALS = ["cups", "books", "chairs", "bottles", "plants", "boxes", "balls", "cars", "people", "trees", "birds",
           "windows", "apples", "dogs"]
ROLES = ["person", "man", "woman", "child", "player", "girl", "boy", "dog", "cat"]
ACTIONS = ["take ibuprofen with coffee", "drive after one beer", "eat raw eggs", "delete the system32 folder",
           "use my phone while it charges", "swim right after eating", "drink tap water in Mexico",
           "leave my laptop plugged in overnight", "give honey to a baby", "freeze cooked rice",
           "run every day", "share my Netflix password", "mix bleach and vinegar", "paint over wallpaper"]
ANIMALS = ["birds", "mammals", "reptiles", "fish", "insects", "snakes", "spiders", "sharks", "frogs", "whales"]
ABILITIES = ["lay eggs", "fly", "have teeth", "live in water", "sleep", "see colours", "migrate", "hibernate"]
GROUPS = ["students", "employees", "players", "passengers", "voters", "patients"]
EVENTS = ["pass the exam", "arrive on time", "vote yes", "get a refund", "finish the race",
          "sign the contract", "test positive"]
ORGS = ["the United Nations", "Microsoft", "the World Bank", "FIFA", "the European Commission", "Apple",
        "the Red Cross", "NASA", "Google", "the BBC"]
ORG_ROLES = ["president", "CEO", "director", "head", "chairman", "leader"]
DOCS = ["a passport", "a driving licence", "a work visa", "a library card", "a fishing permit", "a marriage licence"]
SOFTWARE = ["Python", "Docker", "Node.js", "Git", "PostgreSQL", "Java", "Blender", "VS Code", "Zoom"]
SYSTEMS = ["Windows", "macOS", "Ubuntu", "Android", "iOS", "Fedora", "a Raspberry Pi", "a Chromebook"]
PLACES = ["my phone", "my laptop", "Google Drive", "Dropbox", "an SD card", "my old iPhone", "an external drive",
          "iCloud", "a USB stick", "my work computer"]
UNITS = [("Celsius", "Fahrenheit"), ("miles", "kilometres"), ("pounds", "kilograms"), ("inches", "centimetres"),
         ("litres", "gallons"), ("feet", "metres"), ("ounces", "grams"), ("knots", "miles per hour")]
FORMATS = [("JSON", "XML"), ("CSV", "Excel"), ("PDF", "Word"), ("binary", "decimal"), ("hex", "RGB"),
           ("a dict", "a list of tuples"), ("a tuple", "a set"), ("an integer", "a float"), ("PNG", "JPEG"),
           ("Markdown", "HTML"), ("YAML", "JSON"), ("a DataFrame", "a NumPy array"), ("MP4", "GIF")]
CURRENCIES = ["dollars", "euros", "pounds", "yen", "rupees", "pesos", "francs", "kronor"]
TEAMS = ["Brazil", "Germany", "Argentina", "France", "Spain", "Italy", "England", "the Netherlands", "Portugal",
         "Uruguay"]
WORDS = ["apple", "paris", "monday", "python", "march", "amazon", "turkey", "china", "polish", "may", "bill",
         "august", "jersey", "nice", "reading", "mercury", "java", "ruby", "swift", "windows"]
LANDMARKS = ["the Eiffel Tower", "Mount Everest", "the Burj Khalifa", "the Statue of Liberty", "Big Ben",
             "the Empire State Building", "the Great Pyramid of Giza", "Niagara Falls", "the Shard"]
INVENTIONS = ["the telephone", "the light bulb", "the printing press", "the airplane", "the internet",
              "the microwave oven", "the bicycle", "penicillin", "the radio", "the steam engine"]
BOOKS = ["Pride and Prejudice", "War and Peace", "Moby-Dick", "The Great Gatsby", "Don Quixote", "Hamlet",
         "Frankenstein", "The Odyssey", "Les Miserables", "Jane Eyre"]
HOWTO = ["reset my router", "boil an egg", "tie a tie", "remove a stripped screw", "unclog a drain",
         "change a flat tyre", "make sourdough starter", "back up my iPhone", "clean a cast iron pan",
         "lower my electricity bill", "fall asleep faster", "learn to touch type"]
TERMS = ["an API", "a mortgage", "a black hole", "a hedge fund", "a neural network", "gerrymandering",
         "an index fund", "a VPN", "osmosis", "a sonnet", "entropy", "a blockchain", "a placebo"]


@dataclass(frozen=True)
class Family:
    """One template family. ``frames``: (frame_a, frame_b) pairs; ``variants``: the
    (x, y) values of {X} ("lex:<pool>" for a lexicon-derived pool); ``slots``: other
    slot pools ({A} and {B} draw two different values from ``slots["AB"]``)."""

    kind: str
    name: str
    split: str
    same_answer: bool
    frames: tuple[tuple[str, str], ...]
    variants: object = ()
    slots: dict = field(default_factory=dict)
    n: int = 16


def _f(*pairs: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(pairs)


def _same(*frames: str) -> tuple[tuple[str, str], ...]:
    return tuple((f, f) for f in frames)


SPATIAL_TRAIN = [("in front of", "behind"), ("inside", "outside"), ("on top of", "underneath"),
                 ("near", "far from"), ("at the top of", "at the bottom of"), ("north of", "south of"),
                 ("east of", "west of"), ("in the upper half of", "in the lower half of")]
SPATIAL_TEST = [("left", "right"), ("above", "below"), ("over", "under"), ("on", "under"),
                ("to the left of", "to the right of"), ("in front of", "behind"), ("inside", "outside")]
TEMPORAL_TRAIN = [("last week", "next week"), ("last year", "next year"), ("this morning", "this evening"),
                  ("today", "tomorrow"), ("the summer", "the winter"), ("last month", "next month"),
                  ("the weekend", "Monday")]
TEMPORAL_TEST = [("yesterday", "tomorrow"), ("yesterday", "today"), ("last weekend", "next weekend"),
                 ("this morning", "tonight"), ("Monday morning", "Friday evening"), ("last Christmas", "next Easter")]
TEMPORAL_PREP_TRAIN = [("before", "after"), ("during", "after"), ("before", "during")]
TEMPORAL_PREP_TEST = [("before", "after"), ("during", "after"), ("before", "during"), ("until", "after")]
QUANTIFIER_PAIRS = [("all", "some"), ("all", "none"), ("some", "none"), ("most", "few"), ("all", "most"),
                    ("any", "all"), ("every", "no"), ("both", "neither"), ("each", "any")]
MODAL_PAIRS = [("Can", "Should"), ("Can", "Must"), ("Should", "Must"), ("Will", "Should"), ("May", "Must"),
               ("Could", "Should")]
COMPARATIVES = [("bigger", "smaller"), ("heavier", "lighter"), ("faster", "slower"), ("older", "younger"),
                ("taller", "shorter"), ("cheaper", "more expensive"), ("hotter", "colder"), ("longer", "shorter"),
                ("more popular", "less popular"), ("safer", "more dangerous"), ("richer", "poorer")]
SUPERLATIVES = [("largest", "smallest"), ("tallest", "shortest"), ("fastest", "slowest"), ("oldest", "youngest"),
                ("hottest", "coldest"), ("most expensive", "cheapest"), ("deepest", "shallowest"),
                ("longest", "shortest"), ("richest", "poorest"), ("most populous", "least populous")]
CONSTRAINTS_TRAIN = ["in two sentences", "in three bullet points", "as a table", "in 50 words", "step by step",
                     "for a five-year-old", "in French", "as a poem", "with a code example", "in one paragraph",
                     "for a beginner", "as a numbered list"]
CONSTRAINTS_TEST = ["in one sentence", "in detail with examples", "in under 20 words", "for an expert",
                    "in Spanish", "as a haiku", "in a single word", "as bullet points"]
AUDIENCES = [("a child", "an expert"), ("a beginner", "a professional"), ("a teenager", "a retiree"),
             ("a doctor", "a patient"), ("a student", "a teacher"), ("an investor", "a tourist")]
NUMBER_PAIRS = [("3", "4"), ("10", "15"), ("25", "52"), ("two", "three"), ("100", "1000"), ("7", "70"),
                ("1990", "2010"), ("12", "21"), ("five", "six"), ("0.5", "5"), ("2", "20"), ("30", "40")]

FAMILIES: list[Family] = [
    # ---------------------------------------------------------------- spatial
    Family("spatial", "sp_is_there", "train", False, _same("Is there a {O} {X} the {P}?"), SPATIAL_TRAIN,
           {"O": OBJECTS, "P": OBJECTS}),
    Family("spatial", "sp_what_colour", "train", False, _same("What colour is the {O} {X} the {P}?"), SPATIAL_TRAIN,
           {"O": OBJECTS, "P": OBJECTS}),
    Family("spatial", "sp_count", "train", False, _same("How many {Q} are {X} the {P}?"), SPATIAL_TRAIN,
           {"Q": PLURALS, "P": OBJECTS}),
    Family("spatial", "sp_side", "test", False, _same("What is the {R} on the {X} holding?",
                                                       "Which {O} is on the {X} side of the image?"),
           [("left", "right")], {"R": ROLES, "O": OBJECTS}),
    Family("spatial", "sp_located", "test", False, _same("What is {X} the {O} in this photo?"), SPATIAL_TEST,
           {"O": OBJECTS}),
    # ---------------------------------------------------------------- direction / role swap
    Family("direction_swap", "ds_convert_units", "train", False,
           _f(("How do I convert {A} to {B}?", "How do I convert {B} to {A}?")), (), {"AB": UNITS}),
    Family("direction_swap", "ds_transfer", "train", False,
           _f(("How do I move my photos from {A} to {B}?", "How do I move my photos from {B} to {A}?")), (),
           {"AB": PLACES}),
    Family("direction_swap", "ds_beat", "train", False,
           _f(("Did {A} beat {B} in the last World Cup?", "Did {B} beat {A} in the last World Cup?")), (),
           {"AB": TEAMS}),
    Family("direction_swap", "ds_exchange", "test", False,
           _f(("What is the exchange rate from {A} to {B}?", "What is the exchange rate from {B} to {A}?"),
              ("How many {A} is one of the {B} worth?", "How many {B} is one of the {A} worth?")), (),
           {"AB": CURRENCIES}),
    Family("direction_swap", "ds_format", "test", False,
           _f(("Write a Python function that turns {A} into {B}.", "Write a Python function that turns {B} into {A}."),
              ("Is {A} better than {B} for this?", "Is {B} better than {A} for this?")), (), {"AB": FORMATS}),
    Family("direction_swap", "ds_flight", "test", False,
           _f(("How long is the flight from {A} to {B}?", "How long is the flight from {B} to {A}?"),
              ("Is {A} north of {B}?", "Is {B} north of {A}?")), (), {"AB": "lex:capitals"}),
    # ---------------------------------------------------------------- antonym (WordNet pairs)
    Family("antonym", "ant_adj_what_makes", "train", False,
           _same("What makes something {X}?", "Give me three examples of things that are {X}."), "lex:antonym_a"),
    Family("antonym", "ant_verb_how", "train", False,
           _same("What does it mean to {X} something?", "When should you {X} it?"), "lex:antonym_v"),
    Family("antonym", "ant_noun_cause", "train", False, _same("What usually causes {X}?"), "lex:antonym_n"),
    Family("antonym", "ant_adj_tell", "test", False,
           _same("How can I tell if a {O} is {X}?", "Why would a {O} be {X}?"), "lex:antonym_a", {"O": OBJECTS}),
    Family("antonym", "ant_verb_test", "test", False,
           _same("Is it a good idea to {X} it now?", "Why do people {X} things?"), "lex:antonym_v"),
    Family("antonym", "ant_noun_test", "test", False, _same("Give an example of {X} in everyday life."),
           "lex:antonym_n"),
    # ---------------------------------------------------------------- comparative
    Family("comparative", "cmp_which", "train", False, _same("Which is {X}: {A} or {B}?"), COMPARATIVES,
           {"AB": ANIMALS}),
    Family("comparative", "cmp_than", "train", False, _same("Is {A} {X} than {B}?"), COMPARATIVES,
           {"AB": TEAMS}),
    Family("comparative", "cmp_superlative_test", "test", False,
           _same("What is the {X} animal in the world?", "Which planet is the {X}?",
                 "Name the {X} city in Europe."), SUPERLATIVES),
    # ---------------------------------------------------------------- temporal
    Family("temporal", "tmp_weather", "train", False, _same("Show me the weather in {C} for {X}.",
                                                            "Find hotel prices in {C} for {X}."),
           TEMPORAL_TRAIN, {"C": "lex:capitals"}),
    Family("temporal", "tmp_prep", "train", False, _same("Should I stretch {X} running?",
                                                         "What should I drink {X} a long hike?"), TEMPORAL_PREP_TRAIN),
    Family("temporal", "tmp_tense", "train", False,
           _f(("Who was the {R} of {G}?", "Who is the {R} of {G}?"), ("Who is the {R} of {G}?",
                                                                      "Who will be the {R} of {G}?")),
           (), {"R": ORG_ROLES, "G": ORGS}),
    Family("temporal", "tmp_days", "train", False, _same("Is the museum open on {X}?"), "lex:days"),
    Family("temporal", "tmp_test", "test", False, _same("Show me my calendar for {X}.",
                                                        "What's on the TV schedule for {X}?"), TEMPORAL_TEST),
    Family("temporal", "tmp_prep_test", "test", False, _same("What should I eat {X} a workout?",
                                                             "Is it OK to drink coffee {X} a blood test?"),
           TEMPORAL_PREP_TEST),
    Family("temporal", "tmp_months", "test", False, _same("What is the weather like in {C} in {X}?"),
           "lex:months", {"C": "lex:capitals"}),
    # ---------------------------------------------------------------- format / length / audience
    Family("format_length", "fmt_insert", "train", False,
           _f(("Explain {T}.", "Explain {T} {X}."), ("Summarize {T}.", "Summarize {T} {X}.")),
           [(c, c) for c in CONSTRAINTS_TRAIN], {"T": TOPICS}),
    Family("format_length", "fmt_audience", "train", False, _same("Explain {T} to {X}."), AUDIENCES[:4],
           {"T": TOPICS}),
    Family("format_length", "fmt_test", "test", False,
           _f(("Describe {T}.", "Describe {T} {X}."), ("Tell me about {T}.", "Tell me about {T} {X}.")),
           [(c, c) for c in CONSTRAINTS_TEST], {"T": TOPICS}),
    Family("format_length", "fmt_audience_test", "test", False, _same("Write an introduction to {T} for {X}."),
           AUDIENCES[4:] + [("a child", "an expert")], {"T": TOPICS}),
    # ---------------------------------------------------------------- entity swap
    Family("entity_swap", "ent_country", "train", False,
           _same("What is the population of {X}?", "What language is spoken in {X}?"), "lex:countries"),
    Family("entity_swap", "ent_software", "train", False, _same("How do I install {S} on {X}?"),
           [(a, b) for a, b in zip(SYSTEMS, SYSTEMS[1:])], {"S": SOFTWARE}),
    Family("entity_swap", "ent_language", "train", False, _same("How do you say thank you in {X}?"),
           "lex:languages"),
    Family("entity_swap", "ent_test", "test", False,
           _same("What is the best time of year to visit {X}?", "How expensive is it to live in {X}?"),
           "lex:capitals"),
    Family("entity_swap", "ent_org_test", "test", False, _same("When was {X} founded?"),
           [(a, b) for a, b in zip(ORGS, ORGS[1:])]),
    # ---------------------------------------------------------------- co-hyponym (WordNet contrast sets)
    Family("cohyponym", "coh_animal", "train", False, _same("Is there a {X} in the picture?",
                                                            "How long does a {X} live?"), "lex:animals"),
    Family("cohyponym", "coh_colour", "train", False, _same("Is the {O} {X}?"), "lex:colours", {"O": OBJECTS}),
    Family("cohyponym", "coh_food_test", "test", False, _same("How many calories are in 100 grams of {X}?",
                                                              "Can dogs eat {X}?"), "lex:foods"),
    Family("cohyponym", "coh_instrument_test", "test", False, _same("How hard is it to learn the {X}?"),
           "lex:instruments"),
    # ---------------------------------------------------------------- number
    Family("number", "num_percent", "train", False, _same("What is {X} percent of {N}?",
                                                          "How many calories are in {X} {F}?"), NUMBER_PAIRS[:6],
           {"N": ["200", "80", "1500", "64", "12"], "F": ["eggs", "bananas", "slices of bread", "almonds"]}),
    Family("number", "num_year", "train", False, _same("What was the population of {C} in {X}?"),
           [("1990", "2010"), ("1950", "2000"), ("1800", "1900"), ("2015", "2020")], {"C": "lex:countries"}),
    Family("number", "num_test", "test", False,
           _same("Is {X} a prime number?", "What is the square root of {X}?", "Convert {X} miles to kilometres."),
           NUMBER_PAIRS[6:]),
    # ---------------------------------------------------------------- negation
    Family("negation", "neg_which", "train", False,
           _f(("Which {Q} are safe to eat?", "Which {Q} are not safe to eat?"),
              ("Name {Q} that can fly.", "Name {Q} that cannot fly.")), (), {"Q": ANIMALS + ["fruits", "mushrooms"]}),
    Family("negation", "neg_why", "train", False,
           _f(("Why does my {O} turn on by itself?", "Why doesn't my {O} turn on?"),
              ("Is there a {O} in the photo?", "Is there no {O} in the photo?")), (), {"O": OBJECTS}),
    Family("negation", "neg_test", "test", False,
           _f(("List countries that use the euro.", "List countries that do not use the euro."),
              ("Which foods contain {T}?", "Which foods do not contain {T}?"),
              ("Do {Q} have bones?", "Do {Q} have no bones?")),
           (), {"T": ["gluten", "lactose", "caffeine", "sugar", "nuts"], "Q": ANIMALS}),
    # ---------------------------------------------------------------- quantifier
    Family("quantifier", "q_animals", "train", False, _same("Do {X} {Q} {H}?"),
           [("all", "some"), ("most", "few"), ("all", "most"), ("some", "most"), ("all", "few")],
           {"Q": ANIMALS, "H": ABILITIES}),
    Family("quantifier", "q_people", "train", False, _same("Did {X} of the {G} {E}?"),
           [("all", "some"), ("all", "none"), ("some", "none"), ("each", "any")], {"G": GROUPS, "E": EVENTS}),
    Family("quantifier", "q_test", "test", False, _same("Are {X} of the {Q} in the picture red?",
                                                        "Do {X} of the countries in Europe use the euro?"),
           [("all", "some"), ("all", "none"), ("most", "few"), ("any", "all"), ("some", "none")], {"Q": PLURALS}),
    # ---------------------------------------------------------------- modality
    Family("modality", "mod_action", "train", False, _same("{X} I {V}?"), MODAL_PAIRS[:4], {"V": ACTIONS}),
    Family("modality", "mod_test", "test", False, _same("Which documents {X} I bring to apply for {D}?",
                                                        "{X} children {V}?"),
           [("can", "must"), ("should", "must"), ("may", "must"), ("could", "should")], {"D": DOCS, "V": ACTIONS}),
    # ---------------------------------------------------------------- case / space in quotes and code
    Family("code_quote", "cq_upper", "train", False,
           _same("How many uppercase letters are in '{X}'?", 'Does the string "{X}" start with a capital letter?'),
           "case:words"),
    Family("code_quote", "cq_regex", "train", False, _same("Does the regex `{X}` match the text 'abc 123'?"),
           [(r"\d+", r"\D+"), (r"\s", r"\S"), (r"\w+", r"\W+"), (r"[A-F]", r"[a-f]"), (r"^a b$", r"^a  b$"),
            (r"\bcat\b", r"\Bcat\B"), (r"^Abc", r"^abc"), (r"[0-9A-Z]", r"[0-9a-z]"), (r"(?i)ABC", r"ABC"),
            (r"x y", r"x  y")]),
    Family("code_quote", "cq_len", "train", False, _same("What does `len('{X}')` return in Python?",
                                                         "What is `'{X}'.count(' ')`?"),
           [("a b", "a  b"), ("hi there", "hi  there"), (" x", "x"), ("a\tb", "a b"), ("to be", "to  be"),
            ("x y z", "x  y z")]),
    Family("code_quote", "cq_test", "test", False,
           _same("What does `'{X}'.islower()` return?", "Count the capital letters in \"{X}\".",
                 "Is the word '{X}' a proper noun?"), "case:words"),
    Family("code_quote", "cq_spaces_test", "test", False,
           _same("How many words does `'{X}'.split(' ')` give?", "Count the spaces in '{X}'."),
           [("a b c", "a  b c"), ("one two", "one   two"), ("x y", "x y "), ("hello world", "hello  world"),
            ("red fox", "red\tfox"), ("1 2 3", "1 2  3")]),
    Family("code_quote", "cq_yaml_test", "test", False, _same("Is this YAML valid?\n{X}"), "yaml:"),
]

# ---------------------------------------------------------------------------- paraphrases (same answer)
BASE_QUESTIONS = ["What is {M}?", "How do I {H}?", "Who wrote {B}?", "How tall is {L}?", "When was {I} invented?",
                  "Explain {T}."]
BASE_SLOTS = {"M": TERMS, "H": HOWTO, "B": BOOKS, "L": LANDMARKS, "I": INVENTIONS, "T": TOPICS}

PARAPHRASE_FAMILIES: list[Family] = [
    Family("question_form", "qf_explain", "train", True,
           _f(("What is {M}?", "Can you explain what {M} is?"), ("What is {M}?", "Tell me what {M} is."),
              ("What is {M}?", "What does the term {M} mean?")), (), {"M": TERMS}),
    Family("question_form", "qf_howto", "train", True,
           _f(("How do I {H}?", "How can I {H}?"), ("How do I {H}?", "How do you {H}?"),
              ("How do I {H}?", "I want to {H}. How do I do that?")), (), {"H": HOWTO}),
    Family("question_form", "qf_country", "train", True,
           _f(("What is the capital of {C}?", "Which city is the capital of {C}?"),
              ("What is the population of {C}?", "How many people live in {C}?")), (), {"C": "lex:countries"}),
    Family("question_form", "qf_fact_test", "test", True,
           _f(("How tall is {L}?", "What is the height of {L}?"), ("When was {I} invented?",
                                                                   "In what year was {I} invented?"),
              ("Who wrote {B}?", "Who is the author of {B}?")), (), {"L": LANDMARKS, "I": INVENTIONS, "B": BOOKS}),
    Family("question_form", "qf_vqa_test", "test", True,
           _f(("What colour is the {O} in the image?", "What is the colour of the {O} in the image?"),
              ("Is there a {O} in the picture?", "Does the picture contain a {O}?"),
              ("How many {Q} are in the image?", "What is the number of {Q} in the image?"),
              ("What is the {O} made of?", "What material is the {O} made of?")), (), {"O": OBJECTS, "Q": PLURALS}),
    Family("synonym", "syn_cost", "train", True, _same("How much does a {X} cost?", "Where can I buy a {X}?"),
           "lex:synonyms"),
    Family("synonym", "syn_test", "test", True, _same("How do I clean a {X}?", "What is a {X} used for?"),
           "lex:synonyms"),
    Family("contraction", "con_train", "train", True,
           _f(("What is {M}?", "What's {M}?"), ("I do not understand {T}. Can you explain it?",
                                               "I don't understand {T}. Can you explain it?"),
              ("Why is my {O} not working?", "Why isn't my {O} working?")), (),
           {"M": TERMS, "T": TOPICS, "O": OBJECTS}),
    Family("contraction", "con_test", "test", True,
           _f(("I cannot {H}. What should I do?", "I can't {H}. What should I do?"),
              ("I am trying to {H}. Where do I start?", "I'm trying to {H}. Where do I start?"),
              ("Who is the author of {B}?", "Who's the author of {B}?")), (), {"H": HOWTO, "B": BOOKS}),
    Family("politeness", "pol_train", "train", True,
           _f(("Explain {T}.", "Could you please explain {T}?"), ("Summarize {T}.", "Please summarize {T}."),
              ("What is {M}?", "Hi! What is {M}?")), (), {"T": TOPICS, "M": TERMS}),
    Family("politeness", "pol_test", "test", True,
           _f(("How do I {H}?", "Hello, how do I {H}? Thanks!"), ("Tell me about {T}.",
                                                                 "Would you mind telling me about {T}?"),
              ("What is {M}?", "What is {M}? Thank you in advance.")), (), {"H": HOWTO, "T": TOPICS, "M": TERMS}),
    Family("spelling", "spell_train", "train", True, _same("{X}"), "spelling:train", n=12),
    Family("spelling", "spell_test", "test", True, _same("{X}"), "spelling:test", n=12),
    Family("case_space", "cs_train", "train", True, _same("{X}"), "surface:train"),
    Family("case_space", "cs_test", "test", True, _same("{X}"), "surface:test"),
    Family("symmetric_reorder", "sym_train", "train", True,
           _f(("What is the difference between {A} and {B}?", "What is the difference between {B} and {A}?"),
              ("Compare {A} and {B}.", "Compare {B} and {A}.")), (), {"AB": ANIMALS}),
    Family("symmetric_reorder", "sym_block_train", "train", True,
           _f(("In {E}, how do I {J}?", "How do I {J} in {E}?"), ("How do I {J} in {E}?", "In {E}, how can I {J}?")),
           (), {"E": ["Excel", "Photoshop", "Google Docs", "Word", "Vim", "PowerPoint", "Figma", "Notion"],
                "J": ["undo a change", "add a comment", "find duplicates", "change the font size", "select everything",
                      "insert a table", "zoom in", "rename a file"]}),
    Family("symmetric_reorder", "sym_test", "test", True,
           _f(("How do I install {S} on {Y}?", "On {Y}, how do I install {S}?"),
              ("Are {A} and {B} similar languages?", "Are {B} and {A} similar languages?")), (),
           {"S": SOFTWARE, "Y": SYSTEMS, "AB": "lex:languages"}),
]

# Paraphrase frames have more slot values than contrast families have variants: more rows each.
PARAPHRASE_FAMILIES = [replace(f, n=24) if f.n == 16 else f for f in PARAPHRASE_FAMILIES]

# British sentences; the American side comes from WordNet's spelling-variant synonyms.
SPELLING_SENTENCES = [
    "What is your favourite colour?", "How do I organise my wardrobe?", "Where is the nearest shopping centre?",
    "How do I analyse this data?", "What is the best way to memorise vocabulary?", "Is grey a warm colour?",
    "How do I apologise to a friend?", "What is the behaviour of light in water?", "How many litres are in a gallon?",
    "How much does a theatre ticket cost?", "How do I recognise a fake banknote?", "What does a neighbour owe me?",
    "How do I get rid of mould in the bathroom?", "What is the best catalogue software?",
    "How do I realise my goals?", "Is aluminium magnetic?", "How long is a metre in feet?",
    "What is the flavour of saffron?", "How do I minimise my taxes?", "What is the humour in this joke?",
    "How do I centre a div?", "What is the harbour of Sydney like?", "How do I criticise politely?",
    "What is a good dialogue for a first meeting?", "How do I emphasise a word in speech?",
]
