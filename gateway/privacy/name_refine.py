"""Every PERSON result refined, the language model's and the gazetteer's (`refine`): a span is cut
at line breaks, trimmed of titles, cue words and frequent words at its edges, and dropped when it
names a company or a product (`companies.py`) or a person's affiliation ("Philip Zimmermann
(Stadelmann)"); overlapping spans are merged. Names the token classifier read (`rampart.py`) pass a
lighter filter (`refine`'s `read`), and PERSON spans on what it read as an address are dropped
(`places`). A name found in full and standing alone elsewhere is masked there too, by the
response's one mask per value (`Masker.known`), not here.
"""

from __future__ import annotations

from typing import Sequence

from gateway.privacy.companies import company_or_product
from gateway.privacy.gazetteer import Gazetteer, gazetteer
from gateway.privacy.name_context import Word, text_words, title_before
from gateway.privacy.name_words import (
    COMPANY_WORDS,
    ENTITY,
    LABELS,
    PARTICLES,
    PRODUCT_WORDS,
    STRONG_CUES,
    TITLES,
    WEAK_CUES,
    folded,
)
from gateway.privacy.spans import Span


def refine(spans: list[Span], text: str, read: Sequence[Span] = (), places: Sequence[Span] = ()) -> list[Span]:
    """The analyzer's spans, with names it should not have taken for persons dropped: each PERSON
    span is trimmed of titles, cue words and capitalised common words at its edges, dropped when it
    names a company or a product (`company_or_product`), and overlapping ones are merged. Spans of
    other types pass untouched. `read`: PERSON spans of the token classifier (`rampart.py`), which
    reads a list of surnames or "the Ruoho novel" better than the rules here do: only a company
    word, an organisation word before it or a brand drops one of those; and a PERSON span of the
    other stages mostly inside `places` (parts of an address the classifier read) is dropped."""
    if not any(s.type == ENTITY for s in spans) and not read:
        return spans
    g = gazetteer()
    others: list[Span] = []
    persons: list[Span] = []
    for span in [*spans, *read]:
        if span.type != ENTITY:
            others.append(span)
            continue
        if places and not any(span is r for r in read) and _placed(span, places):
            continue
        for start, end in _lines(text, span.start, span.end):  # a name never reaches over a line break
            kept = _refined(Span(span.type, start, end, span.score), text, g, strict=not any(span is r for r in read))
            if kept is not None:
                persons.append(kept)
    persons = _affiliations(_merge(persons), text, g)
    return others + _merge(persons)


def _placed(span: Span, places: Sequence[Span]) -> bool:
    """Half or more of `span` inside `places`."""
    inside = sum(max(0, min(span.end, p.end) - max(span.start, p.start)) for p in places)
    return 2 * inside >= span.end - span.start


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    if "\n" not in text[start:end]:
        return [(start, end)]
    out, at = [], start
    for piece in text[start:end].split("\n"):
        out.append((at, at + len(piece)))
        at += len(piece) + 1
    return [(a, b) for a, b in out if b > a]


_EDGE = TITLES | LABELS | STRONG_CUES | WEAK_CUES | folded("and or the of at for to in on")
WINDOW = 40  # characters of context read on each side of a span


def _refined(span: Span, text: str, g: Gazetteer, strict: bool = True) -> Span | None:
    lo, hi = max(0, span.start - WINDOW), min(len(text), span.end + WINDOW)
    words = text_words(text, g, lo, hi)
    inside = [k for k, w in enumerate(words) if w.start >= span.start and w.end <= span.end]
    if not inside:
        return None
    i, j = inside[0], inside[-1]
    while i <= j and _trimmed(words[i], g, i < j, title_before(text, words, i)):
        i += 1
    while j >= i and _trimmed(words[j], g, i < j, i == j and title_before(text, words, i)):
        j -= 1
    if i > j or words[j].end - words[i].start < 2 or all(w.key in PARTICLES for w in words[i : j + 1]):
        return None
    if company_or_product(text, words, i, j, g, strict):
        return None
    return Span(span.type, words[i].start, words[j].end, span.score)


def _trimmed(w: Word, g: Gazetteer, more: bool, titled: bool) -> bool:
    """A word trimmed off a PERSON span's edge: a title, a cue or label word, a preposition, or a
    capitalised common English word that is no name ("Tommy Hilfiger Decision"), unless a title
    stands right before it ("Ms. Banks")."""
    if w.plain:
        return False
    if w.key in _EDGE or w.key == "m" and more or w.key in PARTICLES and len(w.key) <= 2:
        return True
    if "'" in w.key and w.key.partition("'")[0] in g.stop:  # "I'm", "we're"
        return True
    return not titled and not w.kind and w.key in g.frequent and w.key not in PRODUCT_WORDS and w.key not in COMPANY_WORDS


def _affiliations(persons: list[Span], text: str, g: Gazetteer) -> list[Span]:
    """Without the one-word PERSON spans that name a person's company: in parentheses right after a
    person ("Philip Zimmermann (Stadelmann)"), after a person and "from" ("Lars Kaiser from Söding"),
    or alone on the line under a person's name (an e-mail signature: "Melanie Schröder\nMohaupt")."""
    out = []
    for k, span in enumerate(persons):
        previous = persons[k - 1] if k else None
        if previous is not None and " " not in text[span.start : span.end].strip() and not _titled_at(text, span.start, g):
            between = text[previous.end : span.start]
            line_start = text.rfind("\n", 0, span.start) + 1
            line_end = text.find("\n", span.end)
            alone = text[line_start : line_end if line_end >= 0 else len(text)].strip() == text[span.start : span.end]
            if (
                between in (" (", " from ")
                and (between == " from " or text[span.end : span.end + 1] == ")")
                or alone
                and between.strip() == ""
                and between.count("\n") == 1
            ):
                continue
        out.append(span)
    return out


def _titled_at(text: str, start: int, g: Gazetteer) -> bool:
    words = text_words(text, g, max(0, start - 20), start + 1)
    return bool(words) and title_before(text, words + text_words(text, g, start, min(len(text), start + 40))[:1], len(words))


def _merge(persons: list[Span]) -> list[Span]:
    """Overlapping PERSON spans as one: their union, with the best score."""
    out: list[Span] = []
    for span in sorted(persons, key=lambda s: (s.start, -s.end)):
        if out and span.start < out[-1].end:
            last = out[-1]
            out[-1] = Span(ENTITY, last.start, max(last.end, span.end), max(last.score, span.score))
        else:
            out.append(span)
    return out
