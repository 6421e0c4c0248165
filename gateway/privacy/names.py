"""Person names beyond the language model's, and company or product names it took for persons
(issue 15).

spaCy's English model finds most English names written in full, but misses many others
(Hungarian, Finnish, Russian, Japanese, Spanish...), a first name or a surname standing alone and
names in lower case; and it takes company and product names for persons. `detect.py` registers
`NameRecognizer` (`register`) and passes every analyzer result through `name_refine.refine`.

The rules read the names gazetteer and its stoplist (`gazetteer.py`), the word lists of
`name_words.py` and the words around a name (`name_context.py`); `refine` drops company and
product names (`companies.py`).

`NameRecognizer` (`find`) takes for a person, in text order:
- two or more adjacent names, first and last in either order ("Nagy Katalin", "maria lopez"), a
  name beside a capitalised word the gazetteer lacks ("Marina Cordeiro", "Kayo Imai"), a surname
  and a given name written together ("佐藤晴斗");
- any capitalised word after a title ("Dr.", "Frau", "Mme", "Sra.", "Pani", "meneer"; "-san");
- one name, or words the gazetteer lacks, with support: a greeting, sign-off or label before it
  ("Hi Sofía", "signed, jukka", "Owner: Nagy"), another cue ("called", "spoke with", "escalated
  by", "from", "ask"), a verb after it ("Virtanen will", "Nagy's team", "Sundqvist to confirm"),
  "for" before it and a clause's end after it ("refund for Eddie;"), or a list after such a name
  ("cc: jukka, ville").
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from presidio_analyzer import EntityRecognizer, RecognizerResult
from presidio_analyzer.nlp_engine import NlpArtifacts

from gateway.privacy.companies import CJK_COMPANY
from gateway.privacy.gazetteer import FIRST, LAST, Gazetteer, gazetteer
from gateway.privacy.name_context import (
    Word,
    adjacent,
    cue_before,
    for_clause,
    greeting_before,
    item_start,
    lower_unknown,
    rare,
    text_words,
    title_before,
    unknown_name,
    verb_after,
)
from gateway.privacy.name_words import BRANDS, CJK, ENTITY, HONORIFIC_SUFFIXES, NOT_NAMES, PARTICLES, folded

# Bump when the gazetteer or the name rules change (here, gazetteer.py, name_words.py,
# name_context.py, companies.py, name_refine.py): stored spans are analysed again.
VERSION = "2"


class NameRecognizer(EntityRecognizer):
    """PERSON spans of gazetteer names (see the module doc). Scores: a pair of names, or a name after
    a title, 0.85; a name next to a capitalised word the gazetteer lacks 0.8 ("Marina Cordeiro");
    a name after a greeting, sign-off or label 0.75; a pair in lower case 0.7; after another cue or
    before a verb 0.6.

    Presidio's context enhancer is not used: it raises a result when a lemma of one of the
    recognizer's context words stands up to five words before it, so "from" five words back would
    count. The cues here are positional: right before the name, or (a verb) right after it."""

    def __init__(self) -> None:
        super().__init__(supported_entities=[ENTITY], name="GazetteerNameRecognizer", supported_language="en", version=VERSION)

    def load(self) -> None:
        gazetteer()

    def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None) -> list[RecognizerResult]:
        if ENTITY not in entities:
            return []
        return [RecognizerResult(ENTITY, start, end, score) for start, end, score in find(text, _elsewhere(nlp_artifacts))]


def _elsewhere(nlp_artifacts: NlpArtifacts | None) -> list[tuple[int, int]]:
    """Where the language model found an organisation, a place, a product...: a lone name inside
    such an entity of several words ("Kaya Tekstil", "Banco Santander") is not taken for a person (a
    pair of names still is). Its one-word entities are not trusted: it often calls a first name or
    a surname standing alone a place or an organisation."""
    entities = getattr(nlp_artifacts, "entities", None) or ()
    return [(e.start_char, e.end_char) for e in entities if e.label_ in _NOT_PERSON_LABELS]


_PLACE_BEFORE = folded("in at near inside outside across via")
_NOT_PERSON_LABELS = frozenset(
    {"ORGANIZATION", "ORG", "LOCATION", "GPE", "LOC", "FAC", "PRODUCT", "NRP", "NORP", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE"}
)
_COMPATIBLE = {
    "capital": ("capital", "nocase"),
    "upper": ("upper", "nocase"),
    "lower": ("lower", "nocase"),
    "nocase": ("capital", "upper", "lower", "nocase"),
    "other": (),
}


def find(text: str, elsewhere: Iterable[tuple[int, int]] = ()) -> list[tuple[int, int, float]]:
    """(start, end, score) of the names in `text`, before `refine`."""
    g = gazetteer()
    words = text_words(text, g)
    blocked = list(elsewhere)
    out: list[tuple[int, int, float]] = []
    i, n = 0, len(words)
    while i < n:
        w = words[i]
        listed = bool(out) and _LISTED.fullmatch(text, out[-1][1], w.start) is not None  # "cc: jukka, ville"
        loose = w.style == "lower" and lower_unknown(w, g)  # a name the gazetteer lacks, in lower case (scored below)
        rare_first = (
            i + 1 < n
            and rare(w, g)
            and words[i + 1].style == "capital"
            and adjacent(text, w, words[i + 1])
            and (words[i + 1].kind & LAST or unknown_name(words[i + 1], g))
        )  # "Kayo Imai"
        if not (w.kind or loose or rare_first or unknown_name(w, g)):
            if w.style == "capital" and w.key not in g.stop and w.key not in NOT_NAMES and title_before(text, words, i):
                j = i  # any capitalised word after a title: "Ms. Banks", "Dr. King"
                while (
                    j + 1 < n
                    and j - i < 2
                    and adjacent(text, words[j], words[j + 1])
                    and words[j + 1].style == "capital"
                    and (words[j + 1].kind or unknown_name(words[j + 1], g))
                ):
                    j += 1
                out.append((w.start, words[j].end, 0.85))
                i = j + 1
                continue
            if w.key in PARTICLES and w.style == "capital" and title_before(text, words, i):
                k = i  # "Mrs. Van Den Broek", "Dr. de Vries"
                while k + 1 < n and words[k + 1].key in PARTICLES and adjacent(text, words[k], words[k + 1]):
                    k += 1
                if (
                    k + 1 < n
                    and adjacent(text, words[k], words[k + 1])
                    and words[k + 1].style == "capital"
                    and (words[k + 1].kind or unknown_name(words[k + 1], g))
                ):
                    out.append((w.start, words[k + 1].end, 0.85))
                    i = k + 2
                    continue
            i += 1
            continue
        if not w.kind and w.style == "nocase" and CJK.fullmatch(w.text):
            if _cjk_name(w.text, g):
                out.append((w.start, w.end, 0.7))
            i += 1
            continue
        j = i
        while j + 1 < n and j - i < 4 and adjacent(text, words[j], words[j + 1]):
            nxt = words[j + 1]
            if nxt.style in _COMPATIBLE[w.style if w.style != "nocase" else nxt.style] and (
                nxt.kind
                or unknown_name(nxt, g)
                or j == i
                and words[j].kind & FIRST
                and rare(nxt, g)
                or nxt.style == "lower"
                and w.style == "lower"
                and lower_unknown(nxt, g)
            ):
                j += 1
            elif nxt.key in PARTICLES and j + 2 < n and adjacent(text, nxt, words[j + 2]) and words[j + 2].kind:
                j += 2
            else:
                break
        score = _run_score(text, words, i, j, g, blocked, listed)
        if score:
            out.append((w.start, words[j].end, score))
        i = j + 1
    return out


_LISTED = re.compile(r"[ \t]*(?:,|,?[ \t]+(?:and|&|y|e|et|und|i|og|och|en))[ \t]*")


def _run_score(
    text: str, words: list[Word], i: int, j: int, g: Gazetteer, blocked: list[tuple[int, int]], listed: bool = False
) -> float:
    """The score of words[i..j] as a PERSON span, or 0. `listed`: a name found just before, a comma
    or "and" between (a list of names after one cue)."""
    run = [x for x in words[i : j + 1] if x.key not in PARTICLES or x.kind]
    names = [x for x in run if x.kind]
    plain = [x for x in names if x.plain]
    unknown = len(run) - len(names)
    styles = {x.style for x in run} - {"nocase"}
    style = styles.pop() if len(styles) == 1 else "nocase" if not styles else "mixed"
    titled = title_before(text, words, i) or any(x.key.endswith(HONORIFIC_SUFFIXES) for x in run)
    cue = cue_before(text, words, i) or ("strong" if listed else "")
    if style in ("mixed", "other"):
        return 0.0
    if style == "lower":  # a pair of names, or names and words the gazetteer lacks after a greeting or sign-off
        if cue == "strong" and len(run) <= 3 and (len(names) >= 2 or unknown and (plain or greeting_before(text, words, i))):
            return 0.7
        if len(run) > 3:
            return 0.0
        if (
            (plain or len(run) == 2 and unknown == 2)
            and len(run) in (2, 3)
            and (cue == "weak" or verb_after(text, words, j) or for_clause(text, words, i, j))
        ):
            return 0.7  # "call agnetha jacobsson back", "luna nijland called", "for piter rybak;"
        if unknown or not plain:
            return 0.0
        if len(names) >= 2:
            return 0.7 if cue or titled or sum(x.key in g.english for x in names) <= 1 else 0.0
        return _single_score(text, words, i, j, names[0], style, titled, cue, g, blocked)
    if titled:
        return 0.85
    if len(names) >= 2 and plain:
        if style == "upper" and len(plain) < 2:
            return 0.0
        if len(plain) >= 2 or all(len(x.key) >= 3 for x in names):
            return 0.85
    if len(names) == 1 and unknown:
        if plain and style != "upper" and names[0].key not in BRANDS:
            return 0.8
        return 0.75 if cue == "strong" and style != "upper" else 0.0
    if not names:  # words the gazetteer lacks, after a title (above) or a cue, or before a verb
        if style == "upper" or not any(unknown_name(x, g) for x in run) or any(x.key in BRANDS for x in run):
            return 0.0
        rest = text[words[j].end : words[j].end + 3].lstrip(" \t")
        if cue == "strong" and (
            not rest or rest[0] in ",.;:!?|()\n—–-" or rest[0].islower() and words[i - 1].key in ("with", "to", "by")
        ):
            return 0.75
        if len(run) >= 2 and (cue == "weak" or verb_after(text, words, j) or for_clause(text, words, i, j)):
            return 0.6
        if len(run) == 1 and verb_after(text, words, j, personal=True, to_verb=item_start(text, words[i].start)):
            return 0.6  # "Reiko wants 300 seats", "Action items: Sapkota to confirm the order"
        return 0.0
    if len(names) == 1:
        return _single_score(text, words, i, j, names[0], style, titled, cue, g, blocked)
    return 0.0


def _single_score(
    text: str,
    words: list[Word],
    i: int,
    j: int,
    w: Word,
    style: str,
    titled: bool,
    cue: str,
    g: Gazetteer,
    blocked: list[tuple[int, int]],
) -> float:
    """One name alone: it needs a title, a cue before it or a verb after it."""
    short = len(w.key) < 3 and not CJK.fullmatch(w.text)
    if short or style == "upper" and not (titled or cue == "strong"):
        return 0.0
    if titled:
        return 0.85
    if cue == "strong" and (w.plain or style != "lower"):
        return 0.75
    if not w.plain or w.key in BRANDS or i > 0 and words[i - 1].key in _PLACE_BEFORE:
        return 0.0
    if any(s < w.end and w.start < e and (s < w.start or e > w.end) for s, e in blocked):
        return 0.0  # inside a longer entity of the language model's ("Kaya Tekstil", "Banco Santander")
    if cue == "weak" and (style != "lower" or w.key not in g.english):
        return 0.6
    if for_clause(text, words, i, j):
        return 0.6  # "Refund ... for Eddie; chargeback", "Card on file for Uta: 4111"
    if style != "lower" and verb_after(text, words, j):
        return 0.6
    return 0.0


def _cjk_name(token: str, g: Gazetteer) -> bool:
    """A surname and a given name written together ("佐藤晴斗", "王伟", "김민준"): a known surname
    followed by one to three more letters, or a known surname and a known given name; never a
    company's name ("合同会社加藤印刷")."""
    if not 2 <= len(token) <= 5 or CJK_COMPANY.search(token):
        return False
    return any(
        token[:cut] in g.last and (len(token) - cut <= 3 or token[cut:] in g.first) for cut in (1, 2, 3) if cut < len(token)
    )


def register(registry: Any) -> None:
    """Add the name recognizers to `registry`."""
    registry.add_recognizer(NameRecognizer())
