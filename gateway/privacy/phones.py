"""Phone numbers (`phone_numbers`, found by `recognizers.PhoneNumberRecognizer` as PHONE_NUMBER),
built on libphonenumber, replacing Presidio's `PhoneRecognizer`, which only tries US GB DE FR IL IN
CA BR (the national formats of other countries were missed):

- a cheap pre-filter (`_PHONE_CHUNK`): runs of 6-17 digits in phone-like groups (spaces, hyphens,
  dots, slashes, parentheses, a leading `+` or `00`, an extension `x12` / `ext. 12`), not glued to
  Latin letters or inside an identifier (`PO-2026...`, `#48213`, `SO123...`), not after `$ € £ ¥`.
  Text without such a run never reaches libphonenumber. Dates, year ranges, times, IPv4 addresses,
  version strings, decimals and Luhn-valid card numbers are dropped here too. Each chunk's result
  is cached (the same numbers recur across texts);
- international numbers (`+CC`, `00CC`, in parentheses or not) go to `PhoneNumberMatcher` with no
  region: valid ones score `INTERNATIONAL` however they are grouped, merely possible ones
  `INTERNATIONAL_POSSIBLE`;
- national ones go to `PhoneNumberMatcher` (leniency VALID) for each region of `PHONE_REGIONS`
  where the digits fit the general number pattern (a regex) and parse as a valid number, so the
  matcher runs for one to three regions, not thirty. A valid number scores `NATIONAL_SHAPED` when
  written like a phone number: the area code in parentheses, digit groups as libphonenumber groups
  numbers of a region where it is valid (leniency STRICT_GROUPING: `9472 7916`, `60-56-85-91`), or
  three groups or more of 2-4 digits with one separator and a last group of 3-4 (`416 60 039`).
  Otherwise (one block of digits, odd grouping such as `4417-2208-19`, `1 234 567`-like thousands,
  `NNN-NN-NNNN`) it scores `NATIONAL_BARE`, under the analyzer's threshold (0.4) unless context
  lifts it;
- context (`value_context.context`): a phone word (`PHONE_CONTEXT`, a few languages), or an e-mail
  address beside the number on the same line (`beside_email`: contact details come together), adds
  `CONTEXT_BOOST`; when the nearest context word before a national number is one of
  `NOT_PHONE_CONTEXT` (SKU, order, invoice, version, price, EUR, ...; on the same line, at most
  three words away) or a currency or `%` follows it, it is dropped. The results are marked as
  already enhanced, so Presidio's enhancer leaves them alone.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from typing import NamedTuple

from gateway.privacy.cards import card_scheme
from gateway.privacy.value_context import LATIN, PHONE_CONTEXT, context

# The regions national-format numbers are tried in (international ones need none).
PHONE_REGIONS = (
    "US",
    "GB",
    "DE",
    "FR",
    "ES",
    "IT",
    "NL",
    "PL",
    "HU",
    "FI",
    "RU",
    "JP",
    "BR",
    "SE",
    "IN",
    "CN",
    "AU",
    "CA",
    "MX",
    "TR",
    "KR",
    "CH",
    "AT",
    "BE",
    "DK",
    "NO",
    "CZ",
    "PT",
    "IE",
    "ZA",
)
INTERNATIONAL = 0.75  # +CC or 00CC and valid: found with no context
INTERNATIONAL_POSSIBLE = 0.3  # +CC, the right length but not a valid number: needs context
NATIONAL_SHAPED = 0.5  # valid in a region and written like a phone number: found with no context
NATIONAL_BARE = 0.15  # valid in a region, but a bare or oddly grouped number: needs context
CONTEXT_BOOST = 0.35  # as Presidio's enhancer: 0.15 + 0.35 = 0.5 passes the threshold 0.4
MIN_DIGITS, MAX_NATIONAL_DIGITS, MAX_INTERNATIONAL_DIGITS = 6, 15, 17
LOCAL_MIN_DIGITS, LOCAL_SCORE = 7, 0.5  # a number valid in no region, kept only under a phone word
NOT_PHONE_CONTEXT = frozenset(
    """
    sku skus order orders po invoice invoices inv ref reference ticket tickets case cases version
    ver v build release firmware serial sn s/n part parts p/n pn item items product model isbn issn
    account acct iban bic swift routing zip postcode postal tracking shipment parcel batch lot receipt
    transaction txn id card credit visa mastercard amex price prices total amount cost costs balance
    qty quantity units pcs page pages pp room port pin otp ssn social taxpayer tax vat ein tin nhs
    passport license licence # № $ € £ ¥ %
    eur usd gbp chf jpy sek nok dkk pln czk huf inr cny rub brl aud cad mxn zar krw
    bestellung rechnung auftrag commande facture pedido factura ordine fattura
""".split()
)
_CURRENCY_AFTER = re.compile(
    r"[ \u00a0]?(?:[%$€£¥]|(?:eur|usd|gbp|chf|jpy|sek|nok|dkk|pln|czk|huf|inr|cny|rub|brl|aud|cad|mxn|zar|krw)\b)",
    re.IGNORECASE,
)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_EMAIL_REACH = 12  # characters between a number and an e-mail address that count as beside it

# A candidate: up to 12 digit groups (the scan stays linear on any text) joined by a short run of
# separators, maybe opened by `+`, `(+` or `(`.
_JOINT = r"(?=[ \u00a0.\-\u2013/()])[ \u00a0]?[-.\u2013/()]{0,2}[ \u00a0]?"
_EXTENSION = r"[ \u00a0]?(?:[xX]|[eE]xt\.?|[eE]xtension)[ \u00a0]?[0-9]{1,7}"  # 555-0143 x12, ext. 12
_PHONE_CHUNK = re.compile(
    rf"(?<![{LATIN}+#@$€£¥%&/.-])(?<![0-9],)(?P<number>(?:\(?\+[ \u00a0]?|\()?[0-9]++(?:{_JOINT}[0-9]++){{0,11}}+\)?)"
    rf"(?:{_EXTENSION})?(?![{LATIN}%@]|[.,/-][0-9])"
)
_DATE = re.compile(
    r"(?<![0-9])(?<![0-9][.\-/])(?:"
    r"(?:19|20)[0-9]{2}([-./])(?:0?[1-9]|1[0-2])\1(?:0?[1-9]|[12][0-9]|3[01])"
    r"|(?:0?[1-9]|[12][0-9]|3[01])([-./])(?:0?[1-9]|1[0-2])\2(?:19|20)?[0-9]{2}"
    r"|(?:0?[1-9]|1[0-2])([-./])(?:0?[1-9]|[12][0-9]|3[01])\3(?:19|20)?[0-9]{2}"
    r")(?![0-9])(?![.\-/][0-9])"
)
_IPV4 = re.compile(r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])")
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+){2,}")  # dotted, one group of a single digit: checked below
_DECIMAL = re.compile(r"[1-9][0-9]*[.,][0-9]+")  # 13.4050, 3.14159265
_TIME = r"(?:[01]?[0-9]|2[0-3])[.:h][0-5][0-9]"
_YEARS = re.compile(r"(?:19|20)[0-9]{2}[ \u00a0]?[-\u2013/][ \u00a0]?(?:19|20)[0-9]{2}")  # 1990-2000
_TIMES = re.compile(rf"{_TIME}(?:[ \u00a0]?[-\u2013][ \u00a0]?{_TIME})?")  # 09.30-11.00
_THOUSANDS = re.compile(r"[1-9][0-9]?([ \u00a0.,'])[0-9]{3}(?:\1[0-9]{3})+")
_SSN_LIKE = re.compile(r"[0-9]{3}-[0-9]{2}-[0-9]{4}")
_EXTENSION_TAIL = re.compile(_EXTENSION + "$")
_PARENTHESISED_AREA = re.compile(r"\(\+?[0-9][0-9 ]{0,6}\)")
_GENERIC_GROUPS = re.compile(r"[0-9]{2,4}([ .-])[0-9]{2,4}(?:\1[0-9]{2,4})*\1[0-9]{3,4}")


class PhoneFinding(NamedTuple):
    start: int
    end: int
    score: float  # after context
    kind: str  # "international", "international-possible", "national-shaped", "national-bare", "local"
    context: str  # the supporting context word, "" when none


def phone_numbers(text: str) -> list[PhoneFinding]:
    """Every phone number candidate in `text`, scored (see the module doc); callers keep those at
    or above their threshold."""
    found: list[PhoneFinding] = []
    for chunk in _PHONE_CHUNK.finditer(text):
        digits = sum(ch.isdigit() for ch in chunk.group("number"))
        if not MIN_DIGITS <= digits <= MAX_INTERNATIONAL_DIGITS:
            continue
        candidates = _chunk_numbers(chunk.group(), chunk.end("number") - chunk.start())
        for rel_start, rel_end, base, kind in candidates:
            start, end = chunk.start() + rel_start, chunk.start() + rel_end
            word, negated = context(text, start, end, PHONE_CONTEXT, NOT_PHONE_CONTEXT)
            if (negated or _CURRENCY_AFTER.match(text, end)) and kind != "international":
                continue
            word = word or beside_email(text, start, end)
            found.append(PhoneFinding(start, end, min(1.0, base + CONTEXT_BOOST) if word else base, kind, word))
        if not candidates and digits >= LOCAL_MIN_DIGITS and chunk.group("number")[0].isdigit():
            # A local number no region's plan knows ("Phone:\n780 6326"): a phone only under a phone word.
            start, end = chunk.start("number"), chunk.end("number")
            word, negated = context(text, start, end, PHONE_CONTEXT, NOT_PHONE_CONTEXT)
            if word and not negated and not _CURRENCY_AFTER.match(text, end) and not _DATE.fullmatch(chunk.group("number")):
                found.append(PhoneFinding(start, end, LOCAL_SCORE, "local", word))
    return found


def beside_email(text: str, start: int, end: int) -> str:
    """ "e-mail" when an e-mail address stands on the same line as `text[start:end]`, at most
    `_EMAIL_REACH` characters away: contact details come together ("questions go to a@b.fr or
    0479790350", "Lise Roy / 01314960243 | lise@roy.net"), as a phone word would say."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    window = text[max(line_start, start - _EMAIL_REACH - 80) : start]
    if any(len(window) - m.end() <= _EMAIL_REACH for m in _EMAIL.finditer(window)):
        return "e-mail"
    after = _EMAIL.search(text, end, min(line_end, end + _EMAIL_REACH + 80))
    return "e-mail" if after is not None and after.start() - end <= _EMAIL_REACH else ""


@lru_cache(maxsize=8192)
def _chunk_numbers(chunk: str, number_end: int) -> tuple[tuple[int, int, float, str], ...]:
    """The phone numbers in one pre-filtered chunk (its extension, if any, from `number_end` on):
    (start, end, base score, kind)."""
    from phonenumbers import Leniency, PhoneNumberMatcher

    number = chunk[:number_end]
    digits = "".join(ch for ch in number if ch.isdigit())
    if _DATE.search(number) or _version_like(number) or any(p.fullmatch(number) for p in (_IPV4, _DECIMAL, _TIMES, _YEARS)):
        return ()
    opened = len(chunk) - len(chunk.lstrip("("))
    plus = chunk.startswith("+", opened)
    if not plus and card_scheme(digits):
        return ()
    if plus or (digits.startswith("00") and digits[2:3] not in ("", "0") and chunk.startswith("00", opened)):
        # International: no region. `00CC` becomes ` +CC` (same length, same offsets).
        subject = chunk if plus else chunk[:opened] + " +" + chunk[opened + 2 :]
        for leniency, score, kind in (
            (Leniency.VALID, INTERNATIONAL, "international"),
            (Leniency.POSSIBLE, INTERNATIONAL_POSSIBLE, "international-possible"),
        ):
            matches = [
                (_international_start(subject, m.start, m.end, opened, plus), m.end)
                for m in PhoneNumberMatcher(subject, "ZZ", leniency)
            ]
            if matches:
                return tuple((s, e, score, kind) for s, e in matches)
        return ()
    if len(digits) > MAX_NATIONAL_DIGITS:
        return ()
    spans: dict[tuple[int, int], bool] = {}  # (start, end) -> written like a phone number
    for region in _regions_for(digits):
        if not _valid_in(chunk, region):
            continue
        for match in PhoneNumberMatcher(chunk, region, Leniency.VALID):
            key = (match.start, match.end)
            if spans.get(key):
                continue
            raw = _EXTENSION_TAIL.sub("", match.raw_string)
            shaped = _shaped(raw) or (
                _grouped(raw)
                and any(m.start == 0 and m.end == len(raw) for m in PhoneNumberMatcher(raw, region, Leniency.STRICT_GROUPING))
            )
            spans[key] = shaped
    return tuple(
        (s, e, NATIONAL_SHAPED if shaped else NATIONAL_BARE, "national-shaped" if shaped else "national-bare")
        for (s, e), shaped in sorted(spans.items())
    )


def _international_start(subject: str, start: int, end: int, opened: int, plus: bool) -> int:
    """Where an international match really starts: libphonenumber takes an unclosed opening
    parenthesis into the match (`(+44 131 496 0096)`), which is punctuation here; the `00` of a
    `00CC` number, read as ` +`, is part of the number."""
    while start < end and subject[start] in "( " and ")" not in subject[start:end]:
        start += 1
    return opened if not plus and start == opened + 1 else start


def _valid_in(chunk: str, region: str) -> bool:
    """Whether the whole chunk parses as a valid number of `region`: a parse and a validity check,
    about a quarter of what a matcher costs, before the matcher runs for that region."""
    from phonenumbers import NumberParseException, is_valid_number, parse

    try:
        return bool(is_valid_number(parse(chunk, region)))
    except NumberParseException:
        return False


def _version_like(chunk: str) -> bool:
    """Dotted groups with a one-digit group: `2.14.3`, `3.2.0.89`, not `01.23.45.67.89`."""
    return _VERSION.fullmatch(chunk) is not None and any(len(g) == 1 for g in chunk.split("."))


def _grouped(raw: str) -> bool:
    """Two digit groups or more, and not a thousands-separated amount or an SSN-like code."""
    return (
        any(not ch.isdigit() for ch in raw.strip("()+"))
        and _THOUSANDS.fullmatch(raw) is None
        and _SSN_LIKE.fullmatch(raw) is None
    )


def _shaped(raw: str) -> bool:
    """An area code in parentheses, or three groups or more of 2-4 digits with one separator."""
    if _PARENTHESISED_AREA.match(raw):
        return True
    return _grouped(raw) and _GENERIC_GROUPS.fullmatch(raw) is not None


def _regions_for(digits: str) -> list[str]:
    """The regions of PHONE_REGIONS where `digits`, less a national prefix, fits the general
    number pattern: a necessary condition for a valid number there (a cheap regex test)."""
    return [region for region, prefix, pattern, lengths in _region_patterns() if _fits(digits, prefix, pattern, lengths)]


def _fits(digits: str, prefix: re.Pattern[str] | None, pattern: re.Pattern[str], lengths: frozenset[int]) -> bool:
    if len(digits) in lengths and pattern.fullmatch(digits):
        return True
    if prefix is not None:
        stripped = prefix.match(digits)
        if stripped is not None and stripped.end() > 0:
            rest = digits[stripped.end() :]
            if pattern.fullmatch(rest) or any(pattern.fullmatch(g) for g in stripped.groups() if g):
                return True
    return False


@cache
def _region_patterns() -> tuple[tuple[str, re.Pattern[str] | None, re.Pattern[str], frozenset[int]], ...]:
    from phonenumbers import PhoneMetadata

    out = []
    for region in PHONE_REGIONS:
        metadata = PhoneMetadata.metadata_for_region(region)
        assert metadata is not None and metadata.general_desc is not None
        general = metadata.general_desc
        prefix = metadata.national_prefix_for_parsing or metadata.national_prefix
        lengths = frozenset(general.possible_length or ())
        pattern = re.compile(general.national_number_pattern or "")
        out.append((region, re.compile(prefix) if prefix else None, pattern, lengths))
    return tuple(out)
