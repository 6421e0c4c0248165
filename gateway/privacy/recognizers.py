"""Card, phone, IBAN and IP address recognizers for the analyzer (issue 15), replacing Presidio's
stock ones (`register`): cards of every major scheme (`cards.py`), phone numbers of thirty regions
(`phones.py`), IBANs in any letter case (`iban_case`), and no version number taken for an IP
address (`version_not_address`). The card, phone and IP recognizers read the words around a number
themselves (`value_context.py`).

Presidio is imported only when the analyzer is built (`register`), as in detect.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import Any

from gateway.privacy.cards import CARD_SCORE, card_numbers
from gateway.privacy.phones import phone_numbers
from gateway.privacy.value_context import context

VERSION = "7"  # bump when a recognizer here (or in cards.py, phones.py, value_context.py) changes: stored spans are analysed again (4: IBANs in any case; 5: cards of unlisted ranges beside a card word; 6: local phone numbers under a phone word; 7: "registered" right before one, a number after a comma)


# ------------------------------------------------------------------------ IBANs and IP addresses

# A four-part version number is a valid IPv4 address: after one of these words (nearest, same
# line, at most three words before) it is not taken for one.
IP_CONTEXT = frozenset({"ip", "ipv4", "ipv6", "address", "host", "server", "client", "gateway", "subnet", "dns", "from", "to"})
VERSION_CONTEXT = frozenset(
    """
    version versions ver v firmware fw build builds release rel patch patched update updated upgrade upgraded
    driver drivers kernel bios os ios android sdk api rev revision package pkg tag model app client-version
""".split()
)
_VERSION_SUFFIX = re.compile(r"[-+~][0-9A-Za-z]")  # 4.12.0.7-beta, 1.2.3.4+build


def version_not_address(text: str, start: int, end: int) -> bool:
    """Whether the IPv4-shaped `text[start:end]` reads as a version number instead."""
    return context(text, start, end, IP_CONTEXT, VERSION_CONTEXT)[1] or _VERSION_SUFFIX.match(text, end) is not None


_TOKEN = re.compile(r"[0-9A-Za-z]+")
_COUNTRY_GROUP = re.compile(r"[A-Za-z]{2}[0-9]{2}")
_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def iban_case(text: str) -> str:
    """`text` with the tokens that can be part of an IBAN in capitals, the same length: a token with
    a digit in it (`de89`, `0532`), and a bank code of up to four letters right after a country
    group (`nwbk` of `gb29 nwbk 6016 ...`). Words around an IBAN stay as they are: read case-blind,
    `ES91 ... 1332 from` took "from" for a last group and failed its checksum."""
    tokens = list(_TOKEN.finditer(text))
    digits = [any(c.isdigit() for c in t.group(0)) for t in tokens]
    out = list(text)
    for i, token in enumerate(tokens):
        word = token.group(0)
        bank_code = (
            0 < i < len(tokens) - 1
            and len(word) <= 4
            and _COUNTRY_GROUP.fullmatch(tokens[i - 1].group(0)) is not None
            and digits[i + 1]
        )
        if digits[i] or bank_code:
            out[token.start() : token.end()] = word.translate(_UPPER)
    return "".join(out)


def register(registry: Any) -> None:
    """Replace Presidio's card, phone and IBAN recognizers in `registry` with the ones here (IBANs in
    any letter case, `iban_case`); keep version numbers from being IP addresses."""
    card_class, phone_class, ip_class, iban_class = _recognizer_classes()
    for name in ("CreditCardRecognizer", "PhoneRecognizer", "IbanRecognizer", "IpRecognizer"):
        registry.remove_recognizer(name)
    registry.add_recognizer(card_class())
    registry.add_recognizer(phone_class())
    registry.add_recognizer(iban_class())
    registry.add_recognizer(ip_class())


@cache
def _recognizer_classes() -> tuple[type[Any], type[Any], type[Any], type[Any]]:
    import re as regex

    from presidio_analyzer import LocalRecognizer, RecognizerResult
    from presidio_analyzer.nlp_engine import NlpArtifacts
    from presidio_analyzer.predefined_recognizers import IbanRecognizer, IpRecognizer

    class Found(LocalRecognizer):
        """One entity type, found by a function of cards.py or phones.py: `found(text)` gives (start, end,
        score, why) for each value. Nothing to load: the patterns compile at import."""

        ENTITY = ""

        def __init__(self) -> None:
            super().__init__(supported_entities=[self.ENTITY], name=type(self).__name__, version=VERSION)

        def load(self) -> None:
            """Nothing to load (Presidio calls this when it builds the recognizer)."""

        def found(self, text: str) -> Iterable[tuple[int, int, float, str]]:
            raise NotImplementedError

        def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None) -> list[RecognizerResult]:
            if self.ENTITY not in entities:
                return []
            return [
                _result(type(self).__name__, self.id, self.ENTITY, start, end, score, why)
                for start, end, score, why in self.found(text)
            ]

    class CardNumberRecognizer(Found):
        """CREDIT_CARD: every major scheme's IIN ranges and lengths, Luhn-checked (`card_numbers`)."""

        ENTITY = "CREDIT_CARD"

        def found(self, text: str) -> Iterable[tuple[int, int, float, str]]:
            return (
                (start, end, CARD_SCORE, f"{scheme} number, Luhn checksum valid") for start, end, scheme in card_numbers(text)
            )

    class PhoneNumberRecognizer(Found):
        """PHONE_NUMBER: libphonenumber over PHONE_REGIONS, scored with context (`phone_numbers`)."""

        ENTITY = "PHONE_NUMBER"

        def found(self, text: str) -> Iterable[tuple[int, int, float, str]]:
            return ((f.start, f.end, f.score, f"{f.kind} phone number, context {f.context!r}") for f in phone_numbers(text))

    class VersionAwareIpRecognizer(IpRecognizer):
        """Presidio's IP_ADDRESS patterns, but an IPv4-shaped version number is not an address."""

        def __init__(self) -> None:
            super().__init__(name="VersionAwareIpRecognizer")

        def analyze(
            self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None, regex_flags: int | None = None
        ) -> list[RecognizerResult]:
            found = super().analyze(text, entities, nlp_artifacts, regex_flags)
            return [r for r in found if ":" in text[r.start : r.end] or not version_not_address(text, r.start, r.end)]

    class AnyCaseIbanRecognizer(IbanRecognizer):
        """Presidio's IBAN patterns and checksum, read on `iban_case(text)`: `de89370400440532013000`
        as well as `DE89 3704 0044 0532 0130 00`. The offsets are the text's own (same length)."""

        def __init__(self) -> None:
            super().__init__(regex_flags=regex.DOTALL | regex.MULTILINE, name="AnyCaseIbanRecognizer")

        def analyze(
            self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None, regex_flags: int | None = None
        ) -> list[RecognizerResult]:
            # Presidio annotates both as required though it defaults them to None.
            return list(super().analyze(iban_case(text), entities, nlp_artifacts, regex_flags))  # type: ignore[arg-type]

    return CardNumberRecognizer, PhoneNumberRecognizer, VersionAwareIpRecognizer, AnyCaseIbanRecognizer


def _result(name: str, identifier: str, entity: str, start: int, end: int, score: float, why: str) -> Any:
    """A result of a recognizer here, marked as already enhanced by context."""
    from presidio_analyzer import AnalysisExplanation, RecognizerResult

    return RecognizerResult(
        entity_type=entity,
        start=start,
        end=end,
        score=score,
        analysis_explanation=AnalysisExplanation(recognizer=name, original_score=score, textual_explanation=why),
        recognition_metadata={
            RecognizerResult.RECOGNIZER_NAME_KEY: name,
            RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: identifier,
            # context is read by the phone recognizer itself (value_context.py) or irrelevant (Luhn-checked cards): Presidio's
            # enhancer must not add its own
            RecognizerResult.IS_SCORE_ENHANCED_BY_CONTEXT_KEY: True,
        },
    )
