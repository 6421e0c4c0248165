"""Mask the relevant entries of one request with stored spans (analysing only what has none), and
every other string the response carries with the same placeholders.

Text is masked before ranking and packing, so the budget counts the bytes that are actually
returned. A document section is masked piece by piece (spans are stored per piece) and joined
again. The other strings (a section's heading path, a slot, a source, an echoed identifier) have no
stored spans: `Masking.fields` analyses them while the response is built, every distinct string
once, in one batched Presidio call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine

from core import work
from core.errors import MaskingUnavailable
from core.records import Fused, Record
from gateway.privacy.detect import PLACEHOLDER, Detector, Span, clean
from gateway.privacy.placeholders import Masker
from gateway.privacy.store import Privacy, stored_spans
from gateway.writes.documents import join_section

# Of the strings analysed while a request is answered (the question, headings, slots, sources), at
# most this much goes to the token classifier (rampart.py): about two of its windows. The rules and
# spaCy's model still read all of it, and a name masked anywhere is masked everywhere (`known`).
REQUEST_READ_CHARS = 1_000


@dataclass(slots=True)
class Masking:
    """One request's masking: its Masker, and every text's spans, by item id."""

    masker: Masker
    spans: dict[str, tuple[Span, ...]]
    originals: dict[str, str]
    analysed_now: int = 0
    report: dict[str, Any] = field(default_factory=dict)
    detector: Detector | None = None
    texts_masked_at: int = -1  # the masker's size when the texts were last masked (`sweep` skips if unchanged)

    def apply(self, entries: list[Fused], keep: frozenset[str]) -> list[Fused]:
        """`text` of every entry, masked in one pass over all the texts they are made of. A value
        found in one text is masked in all of them, where the analyzer missed it too."""
        return [replace(e, record=replace(e.record, text=text)) for e, text in zip(entries, self.entry_texts(entries, keep))]

    def entry_texts(self, entries: Sequence[Fused], keep: frozenset[str]) -> list[str]:
        """Each entry's text (a section's pieces joined), all masked together (`texts`)."""
        ids = [piece for e in entries for piece in (e.pieces or (e.record.id,))]
        masked = iter(self.texts(ids, keep))
        return [join_section([next(masked) for _ in e.pieces]) if e.pieces else next(masked) for e in entries]

    def texts(self, ids: Sequence[str], keep: frozenset[str]) -> list[str]:
        """The texts of `ids` masked together: every value their spans cover is registered first,
        then each text is masked with its own spans and every registered value standing in it."""
        self.masker.register([(self.originals[i], self.spans.get(i, ())) for i in ids], keep)
        masked = self._masked(ids, keep)
        self.texts_masked_at = self.masker.size()
        return masked

    def _masked(self, ids: Sequence[str], keep: frozenset[str]) -> list[str]:
        texts = [self.originals[i] for i in ids]
        known = self.masker.known(texts)
        return self.masker.mask_many(
            [(text, _with(self.spans.get(i, ()), extra, text)) for i, text, extra in zip(ids, texts, known)], keep
        )

    def sweep(self, texts: Sequence[str], keep: frozenset[str]) -> list[str]:
        """Texts masked already, with the values masked since (in a heading, a slot, another item,
        the question) replaced wherever they still stand in clear; their placeholders stay as they
        are. One search over all of them, and none when nothing was masked since the texts were."""
        if self.masker.size() == self.texts_masked_at:
            return list(texts)
        out = []
        for text, known in zip(texts, self.masker.known(texts)):
            inside = [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)] if known else []
            found = [s for s in known if s.type not in keep and not any(a < s.end and s.start < b for a, b in inside)]
            out.append(self.masker.mask(text, found, keep) if found else text)
        return out

    async def fields(
        self,
        objects: Sequence[tuple[dict[str, Any], frozenset[str]]],
        keep: frozenset[str],
        whole: Mapping[str, str] | None = None,
        also: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """Each object with every string in it masked, at any depth, but for the values of its own
        top-level keys listed with it (an allowlist: ids, enumerations, instants, text masked
        already). A string under a key of `whole` (at any depth) is taken as one value of that type,
        e.g. `{"email": "EMAIL_ADDRESS"}` for an echoed identifier. Types in `keep` stay in clear,
        as in text. The other strings are analysed once each, in one batch; a value this request
        masked anywhere (in a text, or in another of these strings) is masked wherever it appears."""
        whole = whole or {}
        found: list[tuple[str, str | None]] = []

        def collect(value: str, kind: str | None) -> str:
            found.append((value, kind))
            return value

        for obj, plain in objects:
            _walk(obj, plain, whole, collect)
        for value, kind in found:
            if kind is not None and value:
                self.masker.mask(value, (Span(kind, 0, len(value), 1.0),), keep)
        # `also`: strings of the request (the question) analysed with these, so what they name is masked
        # in the response too, though they are not returned.
        free = list(
            dict.fromkeys(
                [value for value, kind in found if kind is None and value.strip()] + [value for value in also if value.strip()]
            )
        )
        if free and self.detector is None:
            raise MaskingUnavailable("masking is required but no detector is loaded")
        masked = await anyio.to_thread.run_sync(self._mask_strings, free, keep) if free else {}

        def mask(value: str, kind: str | None) -> str:
            if kind is not None:
                return self.masker.mask(value, (Span(kind, 0, len(value), 1.0),), keep) if value else value
            return masked.get(value, value)

        return [_walk(obj, plain, whole, mask) for obj, plain in objects]

    def _mask_strings(self, texts: list[str], keep: frozenset[str]) -> dict[str, str]:
        assert self.detector is not None
        work.charge(analysed=sum(min(len(text), REQUEST_READ_CHARS) for text in texts))
        detected = self.detector.analyze_many(texts, read_chars=REQUEST_READ_CHARS)
        for text, spans in zip(texts, detected):  # register every value found, before propagating
            self.masker.mask(text, spans, keep)
        known = self.masker.known(texts)
        return {
            text: self.masker.mask(text, clean(list(spans) + extra, text), keep)
            for text, spans, extra in zip(texts, detected, known)
        }


async def prepare(store: Engine, privacy: Privacy, tenant: str, entries: list[Fused], pieces: tuple[Record, ...]) -> Masking:
    """Stored spans for every text the entries are made of; text without current spans is analysed
    now. Without a detector nothing can be masked, so the request fails closed."""
    detector = privacy.detector
    if detector is None:
        raise MaskingUnavailable(f"masking is required but {privacy.unavailable or 'no detector is loaded'}")
    piece_text = {p.id: p.text for p in pieces}
    originals: dict[str, str] = {}
    for entry in entries:
        if entry.pieces:
            originals.update({p: piece_text[p] for p in entry.pieces if p in piece_text})
        else:
            originals[entry.record.id] = entry.record.text
    spans = await anyio.to_thread.run_sync(work.timed(stored_spans), store, tenant, originals, detector.version)
    missing = [i for i in originals if i not in spans]
    for item_id in missing:
        work.charge(analysed=len(originals[item_id]))
        spans[item_id] = await anyio.to_thread.run_sync(work.timed(detector.analyze), originals[item_id])
    return Masking(Masker(), spans, originals, analysed_now=len(missing), detector=detector)


def _walk(
    value: Any,
    plain: frozenset[str],
    whole: Mapping[str, str],
    mask: Callable[[str, str | None], str],
    key: str | None = None,
) -> Any:
    """`value` rebuilt with `mask(string, whole type or None)` applied to every string in it; at
    the top level (`key` None, `value` a dict) the keys in `plain` are left as they are."""
    if isinstance(value, str):
        return mask(value, whole.get(key) if key is not None else None)
    if isinstance(value, dict):
        top = key is None
        return {k: v if top and k in plain else _walk(v, plain, whole, mask, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v, plain, whole, mask, key) for v in value]
    return value


def _with(spans: Sequence[Span], extra: Sequence[Span], text: str) -> Sequence[Span]:
    """A text's own spans (cleaned when stored) and the known values outside them, cleaned again
    only when there are any: most known values in a text are its own spans, found once more."""
    outside = [e for e in extra if not any(s.start < e.end and e.start < s.end for s in spans)]
    return clean(list(spans) + outside, text) if outside else spans
