"""Card numbers (`card_numbers`, found by `recognizers.CardNumberRecognizer` as CREDIT_CARD, score
1.0), replacing Presidio's `CreditCardRecognizer`, which knows cards starting 1, 3, 4, 5[0-5] or 6
with 13-17 digits only (Mastercard's 2-series, 19-digit Visa, 12-digit Maestro and 15-digit JCB
went unmasked).

A run of digit groups (`_CARD_CHAIN`, not glued to letters, not after `+`, not inside a longer
number) is cut into candidates: one group of 12-19 digits, or consecutive groups joined by one and
the same separator (a space or a hyphen) whose first group has 4 digits and whose others have 3-6
(4-4-4-4, 4-6-5, 4-6-4, 4-4-4-4-3, ...). A candidate is a card when its IIN range and length belong
to a scheme of `CARD_SCHEMES` and its Luhn checksum holds. From each group on the longest card is
taken, so a neighbouring number ("... 1111 2028", "Order 12 4111 ...", a CVV) is left out. A block
of 12-15 digits right after a word of `NOT_CARD_CONTEXT` (tracking, order, invoice, ...) is not
taken.
"""

from __future__ import annotations

import re

from gateway.privacy.value_context import LATIN, context

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
# Digit groups joined by single spaces or hyphens, not inside a word, after `+` or in a longer
# number (`1.4111...`, `12/4111...`), nor followed by a letter or a decimal part.
# At most 16 groups a chain (longer runs are cut): the scan stays linear on any text.
_CARD_CHAIN = re.compile(rf"(?<![{LATIN}+])(?<![0-9][.,/-])[0-9]++(?:[ \u00a0-][0-9]++){{0,15}}+(?![{LATIN}]|[.,/-][0-9])")
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
