"""Stable, per-request placeholders for personal data (`Masker`): each distinct value of a request
gets one (`<PERSON_1>`), put in by slicing and restored by Presidio's deanonymize engine, only for
the types a reader may see. See docs/personal-data.md.
"""

from __future__ import annotations

import bisect
import itertools
import re
import threading
from functools import cache
from typing import Any, Iterator, Sequence

from gateway.privacy.detect import LITERAL, MIN_SCORE, PLACEHOLDER
from gateway.privacy.spans import Span


class Masker:
    """One request's placeholders. Thread-safe; the mapping never leaves this object.

    The spans are applied by slicing (`mask_many`, checked against Presidio's anonymizer,
    `presidio_mask`) and Presidio's deanonymize engine restores them (`gateway_restore`). The
    mapping, the numbering and which placeholders may come back stay here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_value: dict[tuple[str, str], str] = {}
        self._values: dict[str, tuple[str, str]] = {}  # placeholder -> (type, value)
        self._counts: dict[str, int] = {}
        self._kept: set[tuple[str, str]] = set()  # (type, value) left in clear: its type is revealed

    def placeholder(self, kind: str, value: str) -> str:
        with self._lock:
            key = (kind, value)
            if key not in self._by_value:
                self._counts[kind] = self._counts.get(kind, 0) + 1
                token = f"<{kind}_{self._counts[kind]}>"
                self._by_value[key] = token
                self._values[token] = key
            return self._by_value[key]

    def mask(self, text: str, spans: Sequence[Span], keep: frozenset[str] = frozenset()) -> str:
        """`text` with every span replaced by its placeholder, except the types in `keep` (those the
        reader may see). Literal placeholder-like text is always replaced. Spans come in text order
        without overlaps (`clean`); one that overlaps an earlier one is skipped."""
        return self.mask_many([(text, spans)], keep)[0]

    def mask_many(self, texts: Sequence[tuple[str, Sequence[Span]]], keep: frozenset[str] = frozenset()) -> list[str]:
        """`mask` of each (text, spans). The placeholders are put in by slicing, not by Presidio's
        anonymizer: the spans are already clean (`clean`: in order, no overlaps), which is all its
        conflict handling would give, and its per-span objects cost 2-3 ms on a 16 KB context of
        ninety items, half the 5 ms a retrieve may spend masking. `tests/gateway/privacy/test_pii.py`
        checks the two give the same text, on every text of the development split."""
        out: list[str] = []
        for text, spans in texts:
            parts: list[str] = []
            cursor = 0
            for span in self._replaced(text, spans, keep):
                parts.append(text[cursor : span.start])
                parts.append(self.placeholder(span.type, text[span.start : span.end]))
                cursor = span.end
            if not parts:
                out.append(text)
                continue
            parts.append(text[cursor:])
            out.append("".join(parts))
        return out

    def presidio_mask(self, text: str, spans: Sequence[Span], keep: frozenset[str] = frozenset()) -> str:
        """`mask` by Presidio's anonymizer (its `gateway_placeholder` operator takes each span's
        placeholder from here): the reference `mask_many` is checked against."""
        chosen = []
        for span in self._replaced(text, spans, keep):
            self.placeholder(span.type, text[span.start : span.end])  # numbered in text order, as mask_many does
            chosen.append(_recognizer_result(span))
        if not chosen:
            return text
        operators = {"DEFAULT": _operator_config(ISSUE, {"masker": self})}
        return str(_anonymizer().anonymize(text, chosen, operators, merge_entities_with_spaces=False).text)

    def _replaced(self, text: str, spans: Sequence[Span], keep: frozenset[str]) -> Iterator[Span]:
        """The spans of `text` to replace, in order, as `mask` and `presidio_mask` take them: one that
        overlaps an earlier one or ends past the text is skipped, and a value of a type in `keep` is
        noted as left in clear (`_keep`)."""
        cursor = 0
        for span in spans:
            if span.start < cursor or span.end > len(text):
                continue
            if span.type in keep and span.type != LITERAL:
                self._keep(span.type, text[span.start : span.end])
                continue
            yield span
            cursor = span.end

    def _keep(self, kind: str, value: str) -> None:
        """Note a value left in clear because its type is revealed to the reader."""
        with self._lock:
            self._kept.add((kind, value))

    def revealed_in(self, text: str) -> set[str]:
        """The types of the values left in clear (revealed) that the text holds."""
        with self._lock:
            kept = list(self._kept)
        return {kind for kind, value in kept if value in text}

    def carries_placeholder(self, text: str) -> bool:
        """Whether the text holds a placeholder this masker issued for personal data (not a literal)."""
        with self._lock:
            return any(self._values.get(m.group(0), (LITERAL,))[0] != LITERAL for m in PLACEHOLDER.finditer(text))

    def restore(self, text: str, reveal: frozenset[str]) -> str:
        """Placeholders this masker issued, of the types in `reveal`, back to their values (literal
        placeholders always); anything else, a mangled or invented placeholder included, stays."""
        with self._lock:
            issued = dict(self._values)
        entities = [
            _operator_result(m.start(), m.end(), issued[m.group(0)][0])
            for m in PLACEHOLDER.finditer(text)
            if m.group(0) in issued and (issued[m.group(0)][0] in reveal or issued[m.group(0)][0] == LITERAL)
        ]
        if not entities:
            return text
        operators = {"DEFAULT": _operator_config(RESTORE, {"values": issued})}
        return str(_deanonymizer().deanonymize(text, entities, operators).text)

    def known(self, texts: Sequence[str], min_chars: int = 3) -> list[list[Span]]:
        """Each text's occurrences (as whole words) of the values this masker has replaced so far,
        typed as they were (score MIN_SCORE, so a span the analyzer found wins an overlap): a value
        masked in one place is masked wherever else it appears, even where the analyzer, with less
        context around it, would miss it."""
        with self._lock:
            types = {value: kind for kind, value in self._by_value if kind != LITERAL and len(value) >= min_chars}
        for value, kind in list(types.items()):
            if kind == "PERSON":  # "Tomomi" alone, once "Tomomi Nishiyama" was masked
                for part in name_parts(value, min_chars):
                    types.setdefault(part, kind)
        if not types:
            return [[] for _ in texts]
        # Every text at once, joined: a value that starts with a word is looked up where that word
        # starts (one pass over the words), any other (`+44 ...`) searched for; each occurrence is
        # checked for word boundaries and mapped back to its text.
        joined = "\x00".join(texts)
        starts = list(itertools.accumulate((len(t) + 1 for t in texts), initial=0))
        words: dict[str, list[int]] = {}
        for m in _WORD_RUN.finditer(joined):
            words.setdefault(m.group(), []).append(m.start())
        hits: list[tuple[int, int, str]] = []
        for value, kind in types.items():
            head = _WORD_RUN.match(value)
            if head is not None:
                places = [at for at in words.get(head.group(), ()) if joined.startswith(value, at)]
            else:
                places, at = [], joined.find(value)
                while at != -1:
                    places.append(at)
                    at = joined.find(value, at + 1)
            for at in places:
                end = at + len(value)
                if not (at and _word_char(joined[at - 1])) and not (end < len(joined) and _word_char(joined[end])):
                    hits.append((at, -len(value), kind))
        found: list[list[Span]] = [[] for _ in texts]
        cursor = 0
        for at, negative, kind in sorted(hits):  # the longest value at a position wins; no overlaps
            end = at - negative
            if at < cursor:
                continue
            index = bisect.bisect_right(starts, at) - 1
            base = starts[index]
            if end <= base + len(texts[index]):
                found[index].append(Span(kind, at - base, end - base, MIN_SCORE))
                cursor = end
        return found

    def register(self, texts: Sequence[tuple[str, Sequence[Span]]], keep: frozenset[str] = frozenset()) -> None:
        """Issue placeholders for the values the spans cover (types in `keep` aside), in text order,
        without masking anything yet: `known` then finds them in every other text too."""
        for text, spans in texts:
            for span in spans:
                if span.type != LITERAL and span.type not in keep and 0 <= span.start < span.end <= len(text):
                    self.placeholder(span.type, text[span.start : span.end])

    def size(self) -> int:
        """How many distinct values this masker has replaced so far."""
        with self._lock:
            return len(self._by_value)

    def counts(self) -> dict[str, int]:
        """Distinct values masked per type (never the values)."""
        with self._lock:
            return {kind: n for kind, n in self._counts.items() if kind != LITERAL}


_WORD = re.compile(r"[^\W\d_][\w'’-]*")  # a word of a name
_WORD_RUN = re.compile(r"\w+")


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def name_parts(value: str, min_chars: int = 3) -> list[str]:
    """The words of a masked name that name its person on their own: capitalised, `min_chars` or
    longer, and not frequent English words ("Tomomi" and "Nishiyama" of "Tomomi Nishiyama"; not
    "Van" or "The")."""
    words = _WORD.findall(value)
    if len(words) < 2:
        return []
    from gateway.privacy.gazetteer import gazetteer
    from gateway.privacy.name_words import fold

    frequent = gazetteer().frequent
    return [w for w in words if len(w) >= min_chars and w[0].isupper() and not w.isupper() and fold(w) not in frequent]


# ---------------------------------------------------------------- Presidio's anonymizer
# Imported when first used: presidio_anonymizer takes over a second to import, and most commands
# that import this module never mask anything.

ISSUE, RESTORE = "gateway_placeholder", "gateway_restore"  # the two operators' names


@cache
def _operator_classes() -> tuple[type, type]:
    from presidio_anonymizer.entities import InvalidParamError
    from presidio_anonymizer.operators import Operator, OperatorType

    class Named(Operator):
        """An operator of this module: its name and type, and the one parameter it needs (`PARAM`,
        a `PARAM_TYPE`; `NEEDS` says what, when it is missing)."""

        NAME, TYPE, PARAM, PARAM_TYPE, NEEDS = "", OperatorType.Anonymize, "", object, ""

        def validate(self, params: dict[str, Any] | None = None) -> None:
            if not isinstance((params or {}).get(self.PARAM), self.PARAM_TYPE):
                raise InvalidParamError(f"{self.NAME} needs {self.NEEDS}")

        def operator_name(self) -> str:
            return self.NAME

        def operator_type(self) -> Any:
            return self.TYPE

    class Issue(Named):
        """Anonymize: the request's placeholder for the span (`params["masker"]`, a Masker)."""

        NAME, TYPE, PARAM, PARAM_TYPE, NEEDS = ISSUE, OperatorType.Anonymize, "masker", Masker, "the request's Masker"

        def operate(self, text: str = "", params: dict[str, Any] | None = None) -> str:
            assert params is not None
            return str(params["masker"].placeholder(params["entity_type"], text))

    class Restore(Named):
        """Deanonymize: a placeholder back to its value (`params["values"]`, placeholder -> (type, value))."""

        NAME, TYPE, PARAM, PARAM_TYPE, NEEDS = RESTORE, OperatorType.Deanonymize, "values", dict, "the request's placeholders"

        def operate(self, text: str = "", params: dict[str, Any] | None = None) -> str:
            assert params is not None
            return str(params["values"][text][1])

    return Issue, Restore


@cache
def _anonymizer() -> Any:
    from presidio_anonymizer import AnonymizerEngine

    engine = AnonymizerEngine()  # type: ignore[no-untyped-call]
    engine.add_anonymizer(_operator_classes()[0])
    return engine


@cache
def _deanonymizer() -> Any:
    from presidio_anonymizer import DeanonymizeEngine

    engine = DeanonymizeEngine()  # type: ignore[no-untyped-call]
    engine.add_deanonymizer(_operator_classes()[1])
    return engine


@cache
def _entities() -> Any:
    from presidio_anonymizer import entities

    return entities


def _operator_config(name: str, params: dict[str, Any]) -> Any:
    return _entities().OperatorConfig(name, params)


def _recognizer_result(span: Span, offset: int = 0) -> Any:
    return _entities().RecognizerResult(span.type, offset + span.start, offset + span.end, span.score)


def _operator_result(start: int, end: int, kind: str) -> Any:
    return _entities().OperatorResult(start, end, kind)
