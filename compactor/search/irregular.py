"""English words whose other forms no stemmer finds: irregular verbs (went, bought, written) and
plurals (children, indices), each with the word a dictionary lists it under.

Snowball stems by suffix, so "bought" never meets "buy", nor "ran" "run": a question in plain
words asks "what did we buy" of a note that says "we bought". `analyze.py` indexes and queries
such a form by its base's stem as well, as it does a regular form by its own. Forms that are
also another common word ("left", "bit", "bound", "ground", "rose", "lay") are not listed: the
base would find notes about something else. Forms of be, do and have are stop words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# base: its irregular past and past participle (one form when they are the same).
# fmt: off
_VERBS: Final = {
    "arise": "arose arisen", "awake": "awoke awoken", "bear": "bore borne", "beat": "beaten",
    "become": "became", "begin": "began begun", "bend": "bent", "bite": "bitten",
    "bleed": "bled", "blow": "blew blown", "break": "broke broken", "breed": "bred", "bring": "brought",
    "build": "built", "burn": "burnt", "buy": "bought", "catch": "caught", "choose": "chose chosen",
    "cling": "clung", "come": "came", "creep": "crept", "deal": "dealt", "dig": "dug", "draw": "drew drawn",
    "dream": "dreamt", "drink": "drank drunk", "drive": "drove driven", "eat": "ate eaten",
    "fall": "fell fallen", "feed": "fed", "feel": "felt", "fight": "fought", "find": "found", "flee": "fled",
    "fly": "flew flown", "forbid": "forbade forbidden", "forget": "forgot forgotten",
    "forgive": "forgave forgiven", "freeze": "froze frozen", "get": "got gotten", "give": "gave given",
    "go": "went gone", "grow": "grew grown", "hear": "heard", "hide": "hid hidden", "hold": "held",
    "keep": "kept", "kneel": "knelt", "know": "knew known", "lead": "led", "lean": "leant", "leap": "leapt",
    "learn": "learnt", "lend": "lent", "lose": "lost", "make": "made", "mean": "meant", "meet": "met",
    "mistake": "mistook mistaken", "overcome": "overcame", "overwrite": "overwrote overwritten",
    "pay": "paid", "rebuild": "rebuilt", "redo": "redid redone", "rewrite": "rewrote rewritten",
    "ride": "rode ridden", "rise": "risen", "run": "ran", "say": "said", "see": "saw seen", "seek": "sought",
    "sell": "sold", "send": "sent", "shake": "shook shaken", "shine": "shone", "shoot": "shot",
    "show": "shown", "shrink": "shrank shrunk", "sing": "sang sung", "sink": "sank sunk",
    "sleep": "slept", "slide": "slid", "speak": "spoke spoken", "spend": "spent", "spin": "spun",
    "spill": "spilt", "stand": "stood", "steal": "stole stolen", "stick": "stuck", "sting": "stung",
    "strike": "struck stricken", "swear": "swore sworn", "sweep": "swept", "swim": "swam swum",
    "swing": "swung", "take": "took taken", "teach": "taught", "tear": "tore torn", "tell": "told",
    "think": "thought", "throw": "threw thrown", "understand": "understood", "undo": "undid undone",
    "wake": "woke woken", "wear": "wore worn", "weep": "wept", "withdraw": "withdrew withdrawn",
    "write": "wrote written",
}
# plural: singular
_PLURALS: Final = {
    "children": "child", "people": "person", "men": "man", "women": "woman", "mice": "mouse",
    "feet": "foot", "teeth": "tooth", "geese": "goose", "indices": "index", "matrices": "matrix",
    "vertices": "vertex", "analyses": "analysis", "crises": "crisis", "theses": "thesis",
    "hypotheses": "hypothesis", "criteria": "criterion", "phenomena": "phenomenon", "halves": "half",
    "shelves": "shelf", "knives": "knife", "wives": "wife",
}
# fmt: on

IRREGULAR: Final[Mapping[str, str]] = {
    **{form: base for base, forms in _VERBS.items() for form in forms.split()},
    **_PLURALS,
}
# Every word either side of the table: a short base ("go") is looked up like a longer word.
WORDS: Final = frozenset(IRREGULAR) | frozenset(IRREGULAR.values())
