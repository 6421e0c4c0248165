"""The words of a text as the name rules read them (`text_words`: each with its gazetteer kind and
its letter case), and what stands around a word: a title before it ("Dr.", "Frau", "meneer"), a
greeting, sign-off, label or other cue ("Hi", "Regards,", "Owner:", "spoke with"), a verb or a
possessive after it ("Virtanen will", "Nagy's team"), "for" before it and a clause's end after it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.privacy.gazetteer import FIRST, LAST, Gazetteer, gazetteer, is_english
from gateway.privacy.name_words import (
    BRANDS,
    GREETINGS,
    LABELS,
    LOWER_TITLES,
    NOT_NAMES,
    PERSON_VERBS,
    PERSONAL_VERBS,
    PRODUCT_WORDS,
    SIGNOFFS,
    STRONG_CUES,
    TITLES,
    WEAK_CUES,
    WORD,
    camel,
    fold,
    folded,
)


@dataclass(frozen=True, slots=True)
class Word:
    start: int
    end: int
    text: str
    key: str  # fold(text)
    kind: int  # FIRST | LAST, WORDNAME, or 0 (see Gazetteer.kind)
    style: str  # "capital", "upper", "lower", "nocase" (a script without case) or "other" ("iPhone")

    @property
    def plain(self) -> bool:
        return bool(self.kind & (FIRST | LAST))


def _style(word: str) -> str:
    if word[0].isupper():
        return "upper" if len(word) > 1 and word.isupper() else "capital"
    if word.islower():
        return "lower"
    return "nocase" if word.lower() == word.upper() else "other"


def text_words(text: str, g: Gazetteer, pos: int = 0, endpos: int | None = None) -> list[Word]:
    out = []
    for m in WORD.finditer(text, pos, len(text) if endpos is None else endpos):
        word = m.group()
        key = fold(word)
        out.append(Word(m.start(), m.end(), word, key, g.kind(key), _style(word)))
    return out


def adjacent(text: str, a: Word, b: Word) -> bool:
    gap = text[a.end : b.start]
    return 0 < len(gap) <= 3 and gap.isspace() and "\n" not in gap


def title_before(text: str, words: list[Word], i: int) -> bool:
    """A title right before word i: "Dr. ", "Mr ", "Frau ", "M. " (with its dot), not inside a
    longer token ("$1.2M. Dell")."""
    if i == 0:
        return False
    prev = words[i - 1]
    gap = text[prev.end : words[i].start]
    if len(gap) > 3 or "\n" in gap or gap.strip() not in ("", "."):
        return False
    if prev.style not in ("capital", "upper") and prev.key not in LOWER_TITLES:
        return False
    if prev.start and text[prev.start - 1] not in " \t\n([\"'“«":
        return False
    return prev.key in TITLES or prev.key == "m" and gap.startswith(".")


def cue_before(text: str, words: list[Word], i: int) -> str:
    """'strong', 'weak' or '' for the word(s) right before word i. A comma or colon may follow a cue
    ("Regards, Nagy", "Owner: jukka"); a label needs its colon; a sign-off may end its line."""
    if i == 0:
        return ""
    prev = words[i - 1]
    raw_gap = text[prev.end : words[i].start]
    gap = raw_gap.strip()
    if gap == "):" and prev.key in LABELS:  # "Escalated by Riedel (account manager): Unger"
        return "strong"
    if len(raw_gap) > 4 or gap not in ("", ",", ":", "-", "—", "–"):
        return ""
    key = prev.key
    if "\n" in raw_gap and key not in SIGNOFFS:
        return ""
    if key in LABELS and gap == ":":
        return "strong"
    if key in STRONG_CUES:
        if key in ("best", "kind", "yours", "greetings") and gap != ",":
            return ""
        return "strong"
    before = words[i - 2].key if i >= 2 else ""
    if key == "you" and before == "thank":
        return "strong"
    if gap not in ("", ":"):
        return ""
    if key in ("with", "to") and before in _WITH_TO_VERBS or key == "by" and before in _BY_VERBS:
        return "strong"
    if key in WEAK_CUES:
        return "weak"
    return ""


_BY_VERBS = folded("""
escalated reported approved signed sent requested raised created opened closed owned submitted forwarded written
reviewed assigned handled booked placed cancelled canceled authorised authorized
""")
_WITH_TO_VERBS = folded("""
spoke spoken speak met meet meeting talked talk call lunch dinner coffee sync chat escalated assigned reassigned
forwarded sent
""")


def item_start(text: str, start: int) -> bool:
    """`start` opens an item of a list: right after ": " or "; "."""
    return text[max(0, start - 2) : start] in (": ", "; ")


def verb_after(text: str, words: list[Word], j: int, personal: bool = False, to_verb: bool = True) -> bool:
    """A verb or possessive right after word j: "Virtanen will", "Nagy's team", "Nagy (Head of",
    "Sundqvist to confirm". `personal`: only a verb that only a person does ("wants", "said")."""
    end = words[j].end
    rest = text[end : end + 3]
    if not personal and (rest[:2] in ("'s", "’s") or rest[:2] == " ("):
        return True
    if j + 1 >= len(words):
        return False
    nxt = words[j + 1]
    if nxt.style != "lower" or not adjacent(text, words[j], nxt):
        return False
    if nxt.key == "to" and j + 2 < len(words) and to_verb:  # "Sundqvist to confirm the order"
        verb = words[j + 2]
        return verb.key in _verbs() and verb.style == "lower" and adjacent(text, nxt, verb)
    return nxt.key in (PERSONAL_VERBS if personal else PERSON_VERBS)


def _verbs() -> frozenset[str]:
    return gazetteer().verbs


def unknown_name(w: Word, g: Gazetteer) -> bool:
    """A word that could be a name the gazetteer lacks: capitalised (or of a script without case),
    letters only, not an English word, a company word or a brand, no CamelCase."""
    if w.kind or w.style not in ("capital", "nocase") or len(w.key) < 2:
        return False
    if w.key in NOT_NAMES or w.key in BRANDS or w.key in PRODUCT_WORDS or is_english(w.key, g):
        return False
    return not camel(w.text)


def rare(w: Word, g: Gazetteer) -> bool:
    """A capitalised word that is no frequent English word and could be a surname beside a first name
    ("Michelle Pronk", "Alberto Testa") or a given name before a surname ("Kayo Imai")."""
    if w.kind or w.style != "capital" or len(w.key) < 2 or w.key in g.frequent or w.key in NOT_NAMES:
        return False
    return w.key not in BRANDS and w.key not in PRODUCT_WORDS and not camel(w.text)


def lower_unknown(w: Word, g: Gazetteer) -> bool:
    """A word in lower case that could be a name the gazetteer lacks (after a cue): not English."""
    return not w.kind and len(w.key) >= 3 and w.key not in NOT_NAMES and w.key not in BRANDS and not is_english(w.key, g)


def greeting_before(text: str, words: list[Word], i: int) -> bool:
    """A greeting, sign-off, "cc" or a label with its colon right before word i ("signed, jukka")."""
    prev = words[i - 1] if i > 0 else None
    return prev is not None and (
        prev.key in GREETINGS
        or prev.key in SIGNOFFS
        or prev.key in ("cc", "bcc", "you")
        or prev.key in LABELS
        and text[prev.end : words[i].start].strip() == ":"
    )


def for_clause(text: str, words: list[Word], i: int, j: int) -> bool:
    """The words right after "for" and right before a clause's end: "Refund ... for Eddie; chargeback"."""
    return (
        i > 0
        and words[i - 1].key == "for"
        and adjacent(text, words[i - 1], words[i])
        and text[words[j].end : words[j].end + 1] in (";", ":", ".", ",")
    )
