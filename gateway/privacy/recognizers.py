"""Card and phone recognizers for the analyzer (issue 15), replacing Presidio's stock ones.

Presidio's `CreditCardRecognizer` knows cards starting 1, 3, 4, 5[0-5] or 6 with 13-17 digits
(4, then 3-4, 3-4 and 3-5), so Mastercard's 2-series, 19-digit Visa, 12-digit Maestro and 15-digit
JCB (2131, 1800) went unmasked; its `PhoneRecognizer` only tries US GB DE FR IL IN CA BR, so the
national formats of other countries were missed.

**Cards** (`card_numbers`, `CardNumberRecognizer`, CREDIT_CARD, score 1.0): a run of digit groups
(`_CARD_CHAIN`, not glued to letters, not after `+`, not inside a longer number) is cut into
candidates: one group of 12-19 digits, or consecutive groups joined by one and the same separator
(a space or a hyphen) whose first group has 4 digits and whose others have 3-6 (4-4-4-4, 4-6-5,
4-6-4, 4-4-4-4-3, ...). A candidate is a card when its IIN range and length belong to a scheme of
`CARD_SCHEMES` and its Luhn checksum holds. From each group on the longest card is taken, so a
neighbouring number ("... 1111 2028", "Order 12 4111 ...", a CVV) is left out. A block of 12-15
digits right after a word of `NOT_CARD_CONTEXT` (tracking, order, invoice, ...) is not taken.

**Phones** (`phone_numbers`, `PhoneNumberRecognizer`, PHONE_NUMBER), built on libphonenumber:

- a cheap pre-filter (`_PHONE_CHUNK`): runs of 6-17 digits in phone-like groups (spaces, hyphens,
  dots, slashes, parentheses, a leading `+` or `00`, an extension `x12` / `ext. 12`), not glued to
  Latin letters or inside an identifier (`PO-2026...`, `#48213`, `SO123...`), not after `$ € £ ¥`.
  Text without such a run never reaches libphonenumber. Dates, year ranges, times, IPv4 addresses,
  version strings, decimals and Luhn-valid card numbers are dropped here too. Each chunk's result
  is cached (the same numbers recur across texts);
- international numbers (`+CC`, `00CC`, in parentheses or not) go to `PhoneNumberMatcher` with no region: valid ones score
  `INTERNATIONAL` however they are grouped, merely possible ones `INTERNATIONAL_POSSIBLE`;
- national ones go to `PhoneNumberMatcher` (leniency VALID) for each region of `PHONE_REGIONS`
  where the digits fit the general number pattern (a regex) and parse as a valid number, so the
  matcher runs for one to three regions, not thirty. A valid number scores `NATIONAL_SHAPED` when
  written like a phone number: the area code in parentheses, digit groups as libphonenumber groups
  numbers of a region where it is valid (leniency STRICT_GROUPING: `9472 7916`, `60-56-85-91`), or
  three groups or more of 2-4 digits with one separator and a last group of 3-4 (`416 60 039`).
  Otherwise (one block of digits, odd grouping such as `4417-2208-19`, `1 234 567`-like thousands,
  `NNN-NN-NNNN`) it scores `NATIONAL_BARE`, under the analyzer's threshold (0.4) unless context
  lifts it;
- context (`context`) is read here, not by Presidio's `LemmaContextAwareEnhancer`, which matches
  substrings of the five lemmas before a value ("ring" in "during", "tel" in "hotel", "cell" in
  "cancellation"): whole words, up to six before the number in the same paragraph (so never from
  another text of a joined batch) and three after it on the same line. A phone word
  (`PHONE_CONTEXT`, a few languages), or an e-mail address beside the number on the same line
  (`beside_email`: contact details come together), adds `CONTEXT_BOOST`; when the nearest context word before a
  national number is one of `NOT_PHONE_CONTEXT` (SKU, order, invoice, version, price, EUR, ...; on
  the same line, at most three words away) or a currency or `%` follows it, it is dropped. The
  results are marked as already enhanced, so Presidio's enhancer leaves them alone.

Presidio is imported only when the analyzer is built (`register`), as in detect.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import Any, NamedTuple

VERSION = "7"  # bump when a recognizer here changes: stored spans are analysed again (4: IBANs in any case; 5: cards of unlisted ranges beside a card word; 6: local phone numbers under a phone word; 7: "registered" right before one, a number after a comma)

# ---------------------------------------------------------------------------------------- cards

# (scheme, IIN ranges as (low, high) prefixes of equal length, allowed lengths)
CARD_SCHEMES: tuple[tuple[str, tuple[tuple[str, str], ...], frozenset[int]], ...] = (
    ("Visa", (("4", "4"),), frozenset({13, 16, 19})),
    ("Mastercard", (("51", "55"), ("2221", "2720")), frozenset({16})),
    ("American Express", (("34", "34"), ("37", "37")), frozenset({15})),
    ("Discover", (("6011", "6011"), ("644", "649"), ("65", "65"), ("622126", "622925")), frozenset(range(16, 20))),
    ("JCB", (("3528", "3589"),), frozenset(range(16, 20))),
    ("JCB", (("2131", "2131"), ("1800", "1800")), frozenset({15})),
    # Maestro 56-69 takes in Maestro UK's 6759, 676770 and 676774
    ("Maestro", (("50", "50"), ("56", "69")), frozenset(range(12, 20))),
    ("UnionPay", (("62", "62"), ("81", "81")), frozenset(range(14, 20))),
    ("Diners Club", (("300", "305"), ("3095", "3095"), ("36", "36"), ("38", "39")), frozenset(range(14, 20))),
    ("Mir", (("2200", "2204"),), frozenset(range(16, 20))),
    ("RuPay", (("60", "60"), ("65", "65"), ("81", "81"), ("82", "82"), ("508", "508")), frozenset({16})),
    ("Troy", (("9792", "9792"),), frozenset({16})),
)
CARD_SCORE = 1.0
# A number of 12-15 digits written as one block right after one of these words (nearest, same line,
# at most three words before) is not taken for a card, unless a word of CARD_CONTEXT is nearer: a
# tracking or order number that happens to pass Luhn (one in ten do).
CARD_CONTEXT = frozenset(
    """
    card cards cc visa mastercard amex maestro discover jcb diners unionpay mir rupay troy credit debit
    payment pay paid pan kreditkarte karte carte tarjeta cartão carta
""".split()
)
NOT_CARD_CONTEXT = frozenset(
    """
    tracking track order orders po invoice inv sku ref reference ticket case serial sn s/n part p/n pn
    item product isbn issn ean upc gtin imei account acct iban routing shipment parcel consignment
    waybill awb batch lot id phone tel mobile fax call
""".split()
)
_LATIN = r"0-9A-Za-z_\u00c0-\u024f"  # a number glued to these is part of an identifier
# Digit groups joined by single spaces or hyphens, not inside a word, after `+` or in a longer
# number (`1.4111...`, `12/4111...`), nor followed by a letter or a decimal part.
# At most 16 groups a chain (longer runs are cut): the scan stays linear on any text.
_CARD_CHAIN = re.compile(rf"(?<![{_LATIN}+])(?<![0-9][.,/-])[0-9]++(?:[ \u00a0-][0-9]++){{0,15}}+(?![{_LATIN}]|[.,/-][0-9])")
_DIGIT_RUN = re.compile(r"[0-9]+")
_MAX_CARD_GROUPS = 6  # 4 + 5 groups of 3 already makes 19 digits


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# A Luhn-valid number of card length outside every scheme's ranges ("card 3519833257665853", test
# and private-label cards): a card only when a card word stands beside it.
UNLISTED = "card number (range of no listed scheme)"


def card_scheme(digits: str) -> str | None:
    """The scheme of a card number (ASCII digits only), or None: IIN range, length and Luhn."""
    length = len(digits)
    if not 12 <= length <= 19:
        return None
    for name, ranges, lengths in CARD_SCHEMES:
        if length in lengths and any(low <= digits[: len(low)] <= high for low, high in ranges):
            return name if luhn_ok(digits) else None
    return None


def card_numbers(text: str) -> list[tuple[int, int, str]]:
    """(start, end, scheme) of every card number in `text` (see the module doc)."""
    found: list[tuple[int, int, str]] = []
    for chain in _CARD_CHAIN.finditer(text):
        if chain.end() - chain.start() < 12:
            continue
        groups = [(m.start(), m.end()) for m in _DIGIT_RUN.finditer(text, chain.start(), chain.end())]
        i = 0
        while i < len(groups):
            for j in range(min(len(groups) - 1, i + _MAX_CARD_GROUPS - 1), i - 1, -1):
                scheme = _card_candidate(text, groups, i, j)
                if scheme == UNLISTED and not _card_word_near(text, groups[i][0], groups[j][1]):
                    scheme = None
                if scheme:
                    start, end = groups[i][0], groups[j][1]
                    if i != j or end - start > 15 or not context(text, start, end, CARD_CONTEXT, NOT_CARD_CONTEXT)[1]:
                        found.append((start, end, scheme))
                    i = j + 1
                    break
            else:
                i += 1
    return found


def _card_candidate(text: str, groups: list[tuple[int, int]], i: int, j: int) -> str | None:
    if not 12 <= groups[j][1] - groups[i][0] - (j - i) <= 19:  # digits, if one-character separators
        return None
    if i != j:
        sizes = [e - s for s, e in groups[i : j + 1]]
        # 4 then groups of 3-6 (4-6-5, 4-4-4-4-3), or groups of 4 ending in a shorter one, as
        # 14-digit Diners, 13-digit Visa and 17-digit Maestro are printed (4-4-4-2, 4-4-4-1, 4-4-4-4-1).
        if sizes[0] != 4 or not (
            all(3 <= n <= 6 for n in sizes[1:]) or (all(n == 4 for n in sizes[1:-1]) and 1 <= sizes[-1] <= 4)
        ):
            return None
        separator = text[groups[i][1] : groups[i + 1][0]]
        if any(text[groups[k][1] : groups[k + 1][0]] != separator for k in range(i + 1, j)):
            return None
    digits = "".join(text[s:e] for s, e in groups[i : j + 1])
    return card_scheme(digits) or (UNLISTED if luhn_ok(digits) else None)


def _card_word_near(text: str, start: int, end: int) -> bool:
    """A card word ("card", "cc", "credit", ...) supports the number, and nothing negates it."""
    word, negated = context(text, start, end, CARD_CONTEXT, NOT_CARD_CONTEXT)
    return bool(word) and not negated


# ---------------------------------------------------------------------------------------- phones

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

PHONE_CONTEXT = frozenset(
    """
    phone phones phoned phoning telephone telephones tel tele ph phone# ph# call calls called calling
    callback mobile mobiles mob cell cells cellphone cellular fax faxes ring rings ringing rang
    whatsapp viber contact contacts contacted contacting reach reached reaching reachable dial dials
    dialed dialled dialing dialling hotline helpline landline switchboard sms voicemail extension ext
    telefon telefone telefono teléfono téléphone tél tel. telefoon telefonnummer rufnummer handy
    handynummer mobil mobilnummer mobiltelefon móvil movil celular cel portable portátil cellulare
    puhelin puh tlf tfn telefonu телефон тел телефона мобильный
""".split()
)
# Words that say "phone" only right before the number: "on my registered 668 5702".
PHONE_CONTEXT_ADJACENT = frozenset({"registered"})
PHONE_CONTEXT_CJK = ("電話", "电话", "전화", "手机", "手機", "携帯", "휴대")
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
# A whole word (not the `INV` of `INV808339`), `s/n`, `tel.`, or a sign.
_WORD = re.compile(r"(?<![^\W_])[^\W\d_]+(?:[/.#][^\W\d_]+)*[.#]?(?![^\W_])|[#№$€£¥%☎📞]|" + "|".join(PHONE_CONTEXT_CJK))
_WORDS_BEFORE, _CHARS_BEFORE, _WORDS_AFTER, _CHARS_AFTER, _NEGATIVE_REACH = 6, 60, 3, 30, 3
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_EMAIL_REACH = 12  # characters between a number and an e-mail address that count as beside it

# A candidate: up to 12 digit groups (the scan stays linear on any text) joined by a short run of
# separators, maybe opened by `+`, `(+` or `(`.
_JOINT = r"(?=[ \u00a0.\-\u2013/()])[ \u00a0]?[-.\u2013/()]{0,2}[ \u00a0]?"
_EXTENSION = r"[ \u00a0]?(?:[xX]|[eE]xt\.?|[eE]xtension)[ \u00a0]?[0-9]{1,7}"  # 555-0143 x12, ext. 12
_PHONE_CHUNK = re.compile(
    rf"(?<![{_LATIN}+#@$€£¥%&/.-])(?<![0-9],)(?P<number>(?:\(?\+[ \u00a0]?|\()?[0-9]++(?:{_JOINT}[0-9]++){{0,11}}+\)?)"
    rf"(?:{_EXTENSION})?(?![{_LATIN}%@]|[.,/-][0-9])"
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


def context(text: str, start: int, end: int, positive: frozenset[str], negative: frozenset[str]) -> tuple[str, bool]:
    """The context of `text[start:end]`: (a supporting word of `positive`, or ""; whether it is
    negated). Whole words only: up to six before it in the same paragraph, the nearest deciding
    (a word of `negative` only on the same line and at most three words away), then up to three
    after it on the same line."""
    low = max(0, start - _CHARS_BEFORE)
    paragraph = text.rfind("\n\n", low, start)
    low = low if paragraph < 0 else paragraph + 2  # never the previous text of a batch either
    line = text.rfind("\n", low, start)
    before = [(m.group().lower(), m.start() > line) for m in _WORD.finditer(text, low, start)][-_WORDS_BEFORE:]
    for distance, (word, same_line) in enumerate(reversed(before)):
        if (
            word in positive
            or _cjk(word, positive)
            or distance == 0
            and positive is PHONE_CONTEXT
            and word in PHONE_CONTEXT_ADJACENT
        ):
            return word, False
        if word in negative and same_line and distance < _NEGATIVE_REACH:
            return "", True
    high = text.find("\n", end, end + _CHARS_AFTER)
    for m in list(_WORD.finditer(text, end, end + _CHARS_AFTER if high < 0 else high))[:_WORDS_AFTER]:
        word = m.group().lower()
        if word in positive or _cjk(word, positive):
            return word, False
    return "", False


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


def _cjk(word: str, positive: frozenset[str]) -> bool:
    return positive is PHONE_CONTEXT and any(marker in word for marker in PHONE_CONTEXT_CJK)


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


# ---------------------------------------------------------------------------------------- Presidio


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

    from presidio_analyzer import AnalysisExplanation, LocalRecognizer, RecognizerResult
    from presidio_analyzer.nlp_engine import NlpArtifacts
    from presidio_analyzer.predefined_recognizers import IbanRecognizer, IpRecognizer

    def result(name: str, identifier: str, entity: str, start: int, end: int, score: float, why: str) -> RecognizerResult:
        return RecognizerResult(
            entity_type=entity,
            start=start,
            end=end,
            score=score,
            analysis_explanation=AnalysisExplanation(recognizer=name, original_score=score, textual_explanation=why),
            recognition_metadata={
                RecognizerResult.RECOGNIZER_NAME_KEY: name,
                RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: identifier,
                # context is read here (phones) or irrelevant (Luhn-checked cards): Presidio's
                # enhancer must not add its own
                RecognizerResult.IS_SCORE_ENHANCED_BY_CONTEXT_KEY: True,
            },
        )

    class Found(LocalRecognizer):
        """One entity type, found by a function of this module: `found(text)` gives (start, end,
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
                result(type(self).__name__, self.id, self.ENTITY, start, end, score, why)
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
