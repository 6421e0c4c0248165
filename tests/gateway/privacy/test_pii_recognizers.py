"""Card and phone recognizers (issue 15), through the real analyzer (`Detector`) and on their own."""

from __future__ import annotations

import random

import phonenumbers
import pytest
from phonenumbers import PhoneNumberFormat, PhoneNumberType

from gateway.privacy import phones, recognizers
from gateway.privacy.cards import CARD_SCHEMES, card_numbers
from gateway.privacy.detect import Detector, _analyzer, analyzer_version
from gateway.privacy.phones import PHONE_REGIONS, phone_numbers

RNG_SEED = 15


def found(detector: Detector, texts: list[str]) -> list[set[tuple[str, str]]]:
    """(type, value) of every span of each text, from one batched analysis."""
    return [{(s.type, text[s.start : s.end]) for s in spans} for text, spans in zip(texts, detector.analyze_many(texts))]


def types_of(detector: Detector, text: str) -> set[str]:
    return {s.type for s in detector.analyze(text)}


def luhn_complete(body: str) -> str:
    """`body` with the check digit that makes it pass Luhn (written here, not taken from the module)."""
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return body + str((10 - total % 10) % 10)


def luhn_valid(number: str) -> bool:
    return luhn_complete(number[:-1]) == number


def grouped(number: str, separator: str) -> str:
    """As cards are printed: 4-6-5 (15 digits), 4-6-4 (14), else fours with a last group of 3-6."""
    sizes = {14: [4, 6, 4], 15: [4, 6, 5]}.get(len(number))
    if sizes is None:
        sizes = [4] * (len(number) // 4)
        rest = len(number) % 4
        if rest >= 3:
            sizes.append(rest)
        else:
            sizes[-1] += rest
    out, at = [], 0
    for size in sizes:
        out.append(number[at : at + size])
        at += size
    return separator.join(out)


def card_table() -> list[tuple[str, str]]:
    """(label, Luhn-valid number) for every scheme, IIN range end (low and high) and length."""
    rng = random.Random(RNG_SEED)
    table = []
    for scheme, ranges, lengths in CARD_SCHEMES:
        for low, high in ranges:
            for prefix in sorted({low, high}):
                for length in sorted(lengths):
                    body = prefix + "".join(rng.choice("0123456789") for _ in range(length - 1 - len(prefix)))
                    table.append((f"{scheme} {prefix} x{length}", luhn_complete(body)))
    return table


# ---------------------------------------------------------------------------------------- registry


def test_the_stock_card_and_phone_recognizers_are_replaced() -> None:
    names = [r.name for r in _analyzer().registry.recognizers]
    assert "CreditCardRecognizer" not in names and "PhoneRecognizer" not in names
    assert names.count("CardNumberRecognizer") == 1 and names.count("PhoneNumberRecognizer") == 1
    assert "IpRecognizer" not in names and names.count("VersionAwareIpRecognizer") == 1


def test_a_change_of_recognizers_changes_the_analyzer_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """So stored spans of the earlier recognizers are analysed again (background worker, `gateway pii analyze`)."""
    before = analyzer_version()
    monkeypatch.setattr(recognizers, "VERSION", recognizers.VERSION + "-next")
    assert analyzer_version() != before


# ---------------------------------------------------------------------------------------- the issue's misses

MISSED_CARDS = {
    "19-digit Visa": luhn_complete("453914880343646712"),
    "12-digit Maestro": luhn_complete("67596498264"),
    "15-digit JCB 2131": luhn_complete("21310000123456"),
    "15-digit JCB 1800": luhn_complete("18000000654321"),
    "Mastercard 2221": luhn_complete("222100004321987"),
    "Mastercard 2720": luhn_complete("272099001234567"),
    "Mastercard 2-series 2500": luhn_complete("250012345678901"),
}


def test_the_cards_the_issue_lists_are_found(detector: Detector) -> None:
    texts = [f"She paid with card {number} yesterday." for number in MISSED_CARDS.values()]
    texts += [f"Card on file: {grouped(number, ' ')}." for number in MISSED_CARDS.values()]
    texts += [f"Noted {number}." for number in MISSED_CARDS.values()]  # no context word needed
    numbers = list(MISSED_CARDS.values()) + [grouped(n, " ") for n in MISSED_CARDS.values()] + list(MISSED_CARDS.values())
    assert all(luhn_valid(n) for n in MISSED_CARDS.values())
    for text, number, spans in zip(texts, numbers, found(detector, texts)):
        assert ("CREDIT_CARD", number) in spans, (text, spans)
        assert not any(kind == "PHONE_NUMBER" for kind, _ in spans), (text, spans)


MISSED_PHONES = [
    "(37) 788-063",
    "416 60 039",
    "9472 7916",
    "60-56-85-91",
    "+44 2079 460958",
    "+4420 7946 0958",
    "+44 20 79 46 09 58",
    "+1-41675-83748",
    "+1 416 7583748",
    "+1-416-758-3748",
]


@pytest.mark.parametrize("sentence", ["Please call {} after lunch.", "Notes from Monday: {} and the rest.", "{}"])
def test_the_phones_the_issue_lists_are_found_with_and_without_a_context_word(detector: Detector, sentence: str) -> None:
    texts = [sentence.format(number) for number in MISSED_PHONES]
    for text, number, spans in zip(texts, MISSED_PHONES, found(detector, texts)):
        assert ("PHONE_NUMBER", number) in spans, (text, spans)


# ---------------------------------------------------------------------------------------- cards


def test_every_scheme_and_length_is_found_compact_spaced_and_hyphenated(detector: Detector) -> None:
    table = card_table()
    assert len(table) > 120
    cases = [(label, written) for label, number in table for written in (number, grouped(number, " "), grouped(number, "-"))]
    texts = [f"Refund {label.split()[0]} card {written} by Friday." for label, written in cases]
    misses = [
        (label, written, spans)
        for (label, written), spans in zip(cases, found(detector, texts))
        if ("CREDIT_CARD", written) not in spans or any(kind == "PHONE_NUMBER" for kind, _ in spans)
    ]
    assert misses == []
    for label, written in cases:  # the recognizer's own answer: exactly the number, nothing else
        text = f"card {written}."
        assert [(text[s:e]) for s, e, _ in card_numbers(text)] == [written], label


def test_numbers_failing_luhn_are_not_cards(detector: Detector) -> None:
    rng = random.Random(RNG_SEED + 1)
    prefixes = [low for _, ranges, _ in CARD_SCHEMES for low, _ in ranges]
    numbers: list[str] = []
    while len(numbers) < 240:
        length = rng.randint(12, 19)
        prefix = rng.choice(prefixes)
        body = prefix + "".join(rng.choice("0123456789") for _ in range(length - 1 - len(prefix)))
        good = luhn_complete(body)
        numbers.append(body + str((int(good[-1]) + rng.randint(1, 9)) % 10))
    assert not any(luhn_valid(n) for n in numbers)
    also_random = ["".join(rng.choice("0123456789") for _ in range(rng.randint(12, 19))) for _ in range(200)]
    also_random = [n for n in also_random if not luhn_valid(n)]
    texts = [f"Reference value {n} noted." for n in numbers + also_random]
    # Grouped, a number whose leading groups happen to make a valid card is read as that card and
    # a neighbouring number (a card and its CVV: see the next test); the others must give nothing.
    spaced = [grouped(n, " ") for n in numbers]
    spaced = [g for g in spaced if not any(luhn_valid(p) for p in leading_groups(g))]
    assert len(spaced) > 200
    texts += [f"Reference value {g} noted." for g in spaced]
    assert [t for t in texts if card_numbers(t)] == []
    assert [t for t, spans in zip(texts, found(detector, texts)) if any(kind == "CREDIT_CARD" for kind, _ in spans)] == []


def leading_groups(written: str) -> list[str]:
    """The digits of every run of leading groups of `written` with 12 digits or more, but not all."""
    groups = written.split(" ")
    return [joined for k in range(1, len(groups)) if len(joined := "".join(groups[:k])) >= 12]


@pytest.mark.parametrize(
    ("text", "card"),
    [
        ("card 4111 1111 1111 1111 123", "4111 1111 1111 1111"),  # a card and its CVV, not a 19-digit card
        ("card 4111 1111 1111 1111 2028", "4111 1111 1111 1111"),  # a neighbouring year is left out
        ("card 4111-1111-1111-1111-2028", "4111-1111-1111-1111"),
        ("Order 12 4111 1111 1111 1111 paid", "4111 1111 1111 1111"),
        ("card 4111111111111111 2028", "4111111111111111"),
        ("cards 4111111111111111 5500005555555559", "4111111111111111"),
        ("card 4111 1111 1111 1111, exp 12/28", "4111 1111 1111 1111"),
        ("Amex 3782 822463 10005 on file", "3782 822463 10005"),
        ("Diners 3056 930902 5904 on file", "3056 930902 5904"),
        ("card (4111111111111111) charged", "4111111111111111"),
        ("Order 12, paid by card 501374193545", "501374193545"),
        ("tracking 4111111111111111", "4111111111111111"),
    ],
)
def test_a_card_never_swallows_a_neighbouring_number(text: str, card: str) -> None:
    """The card alone; a card word nearer than an order word, or 16 digits and more, keep it a card."""
    assert [text[s:e] for s, e, _ in card_numbers(text)][:1] == [card]


@pytest.mark.parametrize(
    "text",
    [
        "run 1234111111111111111156789 done",  # a card number inside a longer run of digits
        "ref 94111111111111111 done",  # 17 digits: not a Visa length, and no Visa inside it
        "id x4111111111111111 and 4111111111111111y",  # glued to letters: an identifier
        "call +4111111111111111",  # after a plus
        "value 1.4111111111111111 and 12/4111111111111111",  # a decimal part, a fraction
        "card 4111 1111 1111 111",  # 15 digits: no Visa of that length
        "card 4111 11111111 1111 9",  # groups not as cards are printed
        "tracking 501374193545 shipped",  # a 12-15-digit Luhn-valid block right after a tracking word
        "Order no. 378282246310005 shipped",
    ],
)
def test_no_card_inside_longer_runs_or_identifiers(text: str) -> None:
    assert card_numbers(text) == []


# ---------------------------------------------------------------------------------------- phones


def example_numbers() -> list[tuple[str, str]]:
    """(label, written number) for every region: fixed line and mobile examples, national and international."""
    out = []
    for region in PHONE_REGIONS:
        for kind in (PhoneNumberType.FIXED_LINE, PhoneNumberType.MOBILE):
            number = phonenumbers.example_number_for_type(region, kind)
            if number is None:
                continue
            for style in (PhoneNumberFormat.NATIONAL, PhoneNumberFormat.INTERNATIONAL):
                out.append((f"{region} {kind} {style}", phonenumbers.format_number(number, style)))
    return out


@pytest.mark.parametrize(
    "sentence",
    [
        "You can reach her on {} until Friday.",  # a context word
        "Telefon: {}",
        "Rappel demandé, téléphone {} (bureau).",
        "Notes from Monday: {} and the rest.",  # no context word
        "{}",
    ],
)
def test_national_and_international_numbers_of_every_region_are_found(detector: Detector, sentence: str) -> None:
    examples = example_numbers()
    assert len(PHONE_REGIONS) >= 20 and len({label.split()[0] for label, _ in examples}) == len(PHONE_REGIONS)
    texts = [sentence.format(number) for _, number in examples]
    misses = [
        (label, text, spans)
        for (label, number), text, spans in zip(examples, texts, found(detector, texts))
        if ("PHONE_NUMBER", number) not in spans
    ]
    assert misses == []


NEGATIVES = [
    "The contract ends on 2026-11-30.",
    "Renewal moves to 30.11.2026.",
    "Invoice due 11/30/2026.",
    "Due 30/11/2026 at 10:00.",
    "from 2026-11-30 to 2026-12-15",
    "Meeting 09.30-11.00 in room 4.",
    "Upgrade to v2.14.3 fixed it.",
    "lodash 4.17.21 is pinned.",
    "Firmware 3.2.0.89 is pinned.",
    "Build 20231130.4 passed QA.",
    "Release 2026.11.3 shipped.",
    "The VPN gateway is 10.20.30.40 and the backup is 172.16.254.1.",
    "SKU 4417-2208-19 is back in stock.",
    "Order PO-2026-00417 shipped.",
    "Ticket #48213 closed.",
    "Case 12345678 closed.",
    "Order 20260315-1234 shipped.",
    "Ship part 1234-567-89 today.",
    "Tracking 123456789012 delivered.",
    "Invoice INV-2026-00417 for $1,299.00 is due.",
    "List price $1,299.00 per seat.",
    "Deal worth EUR 12 345 678 signed.",
    "Budget 12 345 678 EUR approved.",
    "Revenue 4 512 000 in Q3.",
    "Total 1.234.567,89 EUR.",
    "We sold 1234567 units.",
    "Coordinates 52.5200, 13.4050.",
    "Pi is 3.14159265.",
    "ISBN 978-3-16-148410-0",
    "Paid with 4111 1111 1111 1111.",
    "Card 5500-0055-5555-5559 declined.",
    "Card 378282246310005 on file.",
    "The years 2019 2020 2021 were hard.",
    "Between 1990-2000 sales grew.",
    "Pages 123-145.",
]


def test_dates_versions_addresses_codes_prices_and_cards_are_not_phones(detector: Detector) -> None:
    wrong = [
        (text, spans)
        for text, spans in zip(NEGATIVES, found(detector, NEGATIVES))
        if any(kind == "PHONE_NUMBER" for kind, _ in spans)
    ]
    assert wrong == []
    not_cards = [t for t in NEGATIVES if "card" not in t.lower() and "paid" not in t.lower()]
    wrong = [
        (text, spans)
        for text, spans in zip(not_cards, found(detector, not_cards))
        if any(kind == "CREDIT_CARD" for kind, _ in spans)
    ]
    assert wrong == []


def test_a_bare_national_number_needs_a_context_word(detector: Detector) -> None:
    bare = "94727916"  # valid in Denmark and Norway, written as one block
    assert "PHONE_NUMBER" not in types_of(detector, f"Reference {bare} noted.")
    for sentence in ("Call {} tonight.", "Mobile: {}", "{} (mobile)", "WhatsApp {}", "Ring me on {}.", "Tel. {}"):
        text = sentence.format(bare)
        assert ("PHONE_NUMBER", bare) in found(detector, [text])[0], text
    # whole words only: "hotel" is no "tel", "during" no "ring", "recall" no "call"
    for sentence in ("The hotel {} is booked.", "During {} we paused.", "Product recall {} issued."):
        assert "PHONE_NUMBER" not in types_of(detector, sentence.format(bare)), sentence


def test_a_number_after_a_word_of_another_kind_is_not_a_phone(detector: Detector) -> None:
    for sentence in ("SKU {}", "Order {} shipped", "Invoice {} is due", "Version {}", "Price {}"):
        assert "PHONE_NUMBER" not in types_of(detector, sentence.format("9472 7916")), sentence
    # the nearest word decides: a phone word after the order number wins
    text = "Order 12345678 shipped, call 9472 7916 for questions."
    assert ("PHONE_NUMBER", "9472 7916") in found(detector, [text])[0]
    # an international number stays a phone whatever precedes it
    assert ("PHONE_NUMBER", "+44 20 7946 0958") in found(detector, ["Order +44 20 7946 0958"])[0]


@pytest.mark.parametrize(
    ("text", "phone"),
    [
        ("Call 206.269.0743x9150 tomorrow.", "206.269.0743x9150"),  # an extension is part of the number
        ("Direct line (235) 337-4068 x124.", "(235) 337-4068 x124"),
        ("Call +1-780-563-6083 ext. 77 now", "+1-780-563-6083 ext. 77"),
        ("Ring 001-339-763-4101 after nine", "001-339-763-4101"),  # 00 + country code: international
        ("電話番号：09012345678です", "09012345678"),  # a context word glued to the number
        ("Telefonnummer: 030123456", "030123456"),
        ("Mon numéro de téléphone est le 0123456789.", "0123456789"),
    ],
)
def test_extensions_and_other_languages(detector: Detector, text: str, phone: str) -> None:
    assert ("PHONE_NUMBER", phone) in found(detector, [text])[0]


def test_context_does_not_leak_between_texts_of_a_batch(detector: Detector) -> None:
    texts = ["Please call", "94727916", "Call 94727916"]
    spans = found(detector, texts)
    assert spans[1] == set() and ("PHONE_NUMBER", "94727916") in spans[2]


def test_text_without_phone_like_digits_never_reaches_libphonenumber() -> None:
    phones._chunk_numbers.cache_clear()
    text = "Met Ann on Monday; 12 seats at $1,299.00, ticket #48213, port 8443, room B2-114. " * 50
    assert phone_numbers(text) == []
    assert phones._chunk_numbers.cache_info().misses == 0


def test_cards_printed_with_a_short_last_group_are_found(detector: Detector) -> None:
    texts = ["Diners 3056 9309 0259 04 on file", "card 3000 0000 0000 04", "Visa 4222 2222 2222 2 ok"]
    assert found(detector, texts) == [
        {("CREDIT_CARD", "3056 9309 0259 04")},
        {("CREDIT_CARD", "3000 0000 0000 04")},
        {("CREDIT_CARD", "4222 2222 2222 2")},
    ]


def test_an_iban_followed_by_a_word_is_found_whole(detector: Detector) -> None:
    """Read case-blind, "from" was taken for a last group of four and the checksum failed."""
    texts = [
        "wire the refund to ES91 2100 0418 4502 0005 1332 from escrow",
        "IBAN SE4550000000058398257466 from the escrow account",
    ]
    assert found(detector, texts) == [
        {("IBAN_CODE", "ES91 2100 0418 4502 0005 1332")},
        {("IBAN_CODE", "SE4550000000058398257466")},
    ]


def test_a_version_number_is_not_an_ip_address_but_an_address_is(detector: Detector) -> None:
    versions = ["firmware 4.12.0.7 rolled out", "upgraded to version 10.2.3.4 today", "build 6.1.0.12-rc2 passed"]
    assert found(detector, versions) == [set(), set(), set()]
    addresses = ["login from 10.20.30.40 failed", "server 192.168.1.20 is down", "the gateway at 172.16.0.1"]
    assert [{kind for kind, _ in spans} for spans in found(detector, addresses)] == [{"IP_ADDRESS"}] * 3


def test_an_international_number_in_parentheses_is_found_without_them(detector: Detector) -> None:
    texts = [
        "Voicemail from Ms Gilbert (0044 131 496 0096) about order 7",
        "Voicemail (+44 131 496 0096) today",
        "Call (+44) 20 7946 0958 now",
    ]
    assert found(detector, texts) == [
        {("PERSON", "Gilbert"), ("PHONE_NUMBER", "0044 131 496 0096")},
        {("PHONE_NUMBER", "+44 131 496 0096")},
        {("PHONE_NUMBER", "(+44) 20 7946 0958")},
    ]


def test_a_number_written_with_dots_is_a_phone_and_an_address_stays_an_address(detector: Detector) -> None:
    """Four groups of `+33.5.31.66.23.22` are a valid IPv4 address: the longer phone number wins."""
    texts = [
        "signed, Laure Meyer / +33.5.31.66.23.22",
        "Mobile +46.8.40.18.09.",
        "login from 10.20.30.40. Then",
        "host 10.20.30.40.5 answered",
    ]
    assert found(detector, texts) == [
        {("PERSON", "Laure Meyer"), ("PHONE_NUMBER", "+33.5.31.66.23.22")},
        {("PHONE_NUMBER", "+46.8.40.18.09")},
        {("IP_ADDRESS", "10.20.30.40")},
        {("IP_ADDRESS", "10.20.30.40")},
    ]


def test_an_email_address_beside_a_bare_number_is_context(detector: Detector) -> None:
    for text, number in (
        ("questions go to shill@gmail.com or 2073868690.", "2073868690"),
        ("signed, Leslie Reynolds / 01314960243 | lreynolds@henderson.net", "01314960243"),
        ("jari96@kolumbus.fi, 0965431459", "0965431459"),
    ):
        assert ("PHONE_NUMBER", number) in found(detector, [text])[0], text
    # not across a line, not far away, and a word of another kind still decides
    for text in (
        "questions go to shill@gmail.com\n2073868690 was the batch",
        "Order 2073868690 from shill@gmail.com",
        "shill@gmail.com wrote that the reference is 2073868690",
        "Reference 94727916 noted.",
    ):
        assert "PHONE_NUMBER" not in types_of(detector, text), text


@pytest.mark.parametrize(
    "iban",
    [
        "de89370400440532013000",
        "de89 3704 0044 0532 0130 00",
        "De89 3704 0044 0532 0130 00",
        "gb29 nwbk 6016 1331 9268 19",
        "GB29NWBK60161331926819",
        "SE8769685974711154155224",
        "SE82 6557 6178 8218 5071 4641",
    ],
)
def test_an_iban_in_any_letter_case_is_found_whole(iban: str) -> None:
    from gateway.privacy.detect import Detector

    text = f"Refunds go to {iban} from 04/27/27 onwards."
    found = [text[s.start : s.end] for s in Detector().analyze(text) if s.type == "IBAN_CODE"]
    assert found == [iban]


def test_iban_case_keeps_the_length_and_the_words_around() -> None:
    from gateway.privacy.recognizers import iban_case

    text = "pay es91 2100 0418 4502 0005 1332 from the account, or gb29 nwbk 6016 from 04/27 as before"
    assert len(iban_case(text)) == len(text)
    assert iban_case(text) == "pay ES91 2100 0418 4502 0005 1332 from the account, or GB29 NWBK 6016 from 04/27 as before"


@pytest.mark.parametrize(
    "text",
    [
        "my credit card 3590730093437731 has been lost",
        "card number 3519833257665853 is lost",
        "cc 3509413199654323 on my e-mail",
        "points won on credit card 060426070011 transactions",
    ],
)
def test_a_luhn_valid_number_of_no_listed_range_is_a_card_beside_a_card_word(text: str) -> None:
    from gateway.privacy.cards import card_numbers

    [(start, end, _)] = card_numbers(text)
    assert text[start:end].isdigit()


@pytest.mark.parametrize(
    "text",
    [
        "order 3519833257665853 shipped",
        "SKU 3519833257665853",
        "3519833257665853",
        "card reader serial 3519833257665853",
        "card 3519833257665854",
    ],
)  # the last fails Luhn
def test_an_unlisted_number_without_a_card_word_or_checksum_is_no_card(text: str) -> None:
    from gateway.privacy.cards import card_numbers

    assert card_numbers(text) == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Personal Info:\nPhone:\n780 6326\n\nE-mail:\nsilvia@fleckens.hu", "780 6326"),  # a label on the line before
        ("Tel 555 0199 after six", "555 0199"),
        ("order 7806326 shipped; call me", None),  # an order number, though a phone word follows
        ("SKU 1234567 is back", None),
        ("Phone: 12.03.2026", None),  # a date
    ],
)
def test_a_local_number_of_no_region_is_a_phone_only_under_a_phone_word(text: str, found: str | None) -> None:
    from gateway.privacy.phones import phone_numbers

    assert [text[f.start : f.end] for f in phone_numbers(text)] == ([found] if found else [])


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("didn't get any message on my registered 668 5702. Could you look into it?", ["668 5702"]),
        ("registered office: company number 1234567", []),  # "registered" only right before the number
        ("Registered 12.03.2026", []),  # a date
        ("085 175 7641-Office\\,3660170548-Fax", ["085 175 7641", "3660170548"]),  # glued to a comma
        ("Totals: 1,2345678 units", []),  # a digit before the comma: one number
    ],
)
def test_a_phone_right_after_registered_or_a_comma(detector: Detector, text: str, found: list[str]) -> None:
    assert sorted(text[s.start : s.end] for s in detector.analyze(text) if s.type == "PHONE_NUMBER") == sorted(found)
