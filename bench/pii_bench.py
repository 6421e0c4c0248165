"""PII benchmark: how well and how fast `gateway.privacy.detect` finds and masks personal data.

Generates a seeded, labelled set of short CRM-style notes (meeting notes, support tickets, e-mails)
with planted personal data at exact character offsets (names of many origins, e-mail addresses on
real TLDs, libphonenumber-valid phone numbers of 13 countries in several formats, Luhn-valid cards
of seven issuers, IBANs with valid check digits of 11 countries, IPv4/IPv6 addresses, US SSNs) and
hard negatives (notes without personal data, order/ticket/part numbers, dates, prices, version
strings, eponymous company names). Then, in one process and without the network:

1. quality: `Detector().analyze` on every note, per type support / TP / precision / recall / F1,
   exact-boundary matches, cross-type confusions, what stays visible after masking;
2. analysis speed: warm KB/s, against spaCy's pipeline alone on the same notes (same run);
3. masking cost at 16 KB: contexts of whole notes packed to 16,000 UTF-8 bytes with their spans
   precomputed (as stored at ingest), `Masker().mask` over every item with a fresh Masker per
   context, p50/p95 ms against copying the same texts (same run), MET/MISSED against 5 ms p95;
   and re-analysing a few such contexts at request time, the cost that storing spans avoids.

Run from the project root with the project's venv:

    .venv/bin/python bench/pii_bench.py                      # ~600 notes, 300 contexts (~1-2 min on 2 cores)
    .venv/bin/python bench/pii_bench.py --notes 200 --contexts 200 --reanalyze 2 --show 5

See bench/history/pii_bench.md ("What it does") for what each printed figure means.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import phonenumbers
from harness import code_revision

from gateway.privacy.detect import ENTITY_TYPES, LITERAL, Detector, Span, _analyzer
from gateway.privacy.mask import Masking
from gateway.privacy.placeholders import Masker

SEED = 20261201
NOTES = 600
CONTEXTS = 300
CONTEXT_BYTES = 16_000
REANALYZE = 5
SHOW = 3
TARGET_MS = 5.0
MATCH_OVERLAP = 0.5  # a detected span matches a gold span when it covers at least half of it

# ---------------------------------------------------------------- vocabulary

# (origin, first names, last names). A person is a first and a last name of one origin.
NAMES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "english",
        (
            "James",
            "Mary",
            "Robert",
            "Patricia",
            "Michael",
            "Jennifer",
            "David",
            "Linda",
            "William",
            "Elizabeth",
            "Sarah",
            "Thomas",
            "Emily",
            "Daniel",
            "Rebecca",
            "Oliver",
            "Charlotte",
            "Harry",
        ),
        (
            "Smith",
            "Johnson",
            "Williams",
            "Brown",
            "Miller",
            "Davis",
            "Thornton",
            "Whitaker",
            "Hughes",
            "Fletcher",
            "Palmer",
            "Carter",
            "Bennett",
            "Harrison",
            "Cole",
            "Ashworth",
            "Pemberton",
            "Reynolds",
        ),
    ),
    (
        "irish-scottish",
        ("Siobhan", "Niamh", "Ciaran", "Aoife", "Declan", "Fiona", "Eoin", "Callum", "Mairead", "Padraig"),
        ("O'Brien", "Murphy", "Kelly", "Gallagher", "McCarthy", "Fitzgerald", "MacLeod", "Byrne", "Doyle", "O'Sullivan"),
    ),
    (
        "german",
        ("Jonas", "Lukas", "Anna", "Katrin", "Jürgen", "Stefan", "Sabine", "Matthias", "Ursula", "Felix", "Henrike"),
        ("Müller", "Schmidt", "Weber", "Fischer", "Becker", "Hoffmann", "Schäfer", "Wagner", "Zimmermann", "Krüger", "Brandt"),
    ),
    (
        "french",
        ("Camille", "Julien", "Élodie", "Mathieu", "Céline", "Antoine", "Margaux", "Luc", "Sylvie", "Thibault"),
        ("Dubois", "Lefèvre", "Moreau", "Laurent", "Girard", "Rousseau", "Fontaine", "Chevalier", "Bernard", "Mercier"),
    ),
    (
        "spanish",
        ("José", "María", "Alejandro", "Lucía", "Javier", "Carmen", "Diego", "Valentina", "Santiago", "Gabriela"),
        ("García", "Fernández", "López", "Martínez", "Rodríguez", "Sánchez", "Herrera", "Castillo", "Ortega", "Navarro"),
    ),
    (
        "italian",
        ("Giulia", "Marco", "Francesca", "Alessandro", "Chiara", "Lorenzo", "Federica", "Matteo"),
        ("Rossi", "Bianchi", "Romano", "Colombo", "Ricci", "Marino", "Greco", "Conti", "Esposito"),
    ),
    (
        "portuguese",
        ("João", "Ana", "Rafael", "Beatriz", "Thiago", "Larissa", "Gonçalo"),
        ("Silva", "Santos", "Oliveira", "Pereira", "Costa", "Carvalho", "Almeida"),
    ),
    (
        "slavic",
        ("Katarzyna", "Piotr", "Tomasz", "Agnieszka", "Dmitri", "Olga", "Natalia", "Pavel", "Oksana", "Marek"),
        ("Kowalski", "Nowak", "Wiśniewska", "Novák", "Ivanov", "Petrova", "Shevchenko", "Horvat", "Zieliński", "Dvořák"),
    ),
    (
        "nordic-dutch",
        ("Lars", "Ingrid", "Søren", "Astrid", "Mikkel", "Freya", "Pieter", "Sanne", "Joost", "Aino"),
        ("Andersson", "Johansson", "Nielsen", "Lindqvist", "Haugen", "Virtanen", "de Vries", "van Dijk", "Jansen", "Bakker"),
    ),
    (
        "indian",
        ("Priya", "Rahul", "Ananya", "Vikram", "Deepika", "Arjun", "Sunita", "Rohan", "Kavya", "Lakshmi"),
        ("Sharma", "Patel", "Iyer", "Raghunathan", "Reddy", "Gupta", "Nair", "Chatterjee", "Desai", "Menon"),
    ),
    (
        "chinese",
        ("Wei", "Li Na", "Jun", "Xiaoming", "Mei", "Hao", "Yan", "Zhiwei", "Jing"),
        ("Wang", "Li", "Zhang", "Liu", "Chen", "Yang", "Huang", "Zhou", "Wu"),
    ),
    (
        "japanese-korean",
        ("Yuki", "Haruto", "Sakura", "Kenji", "Aiko", "Takeshi", "Ji-woo", "Min-jun", "Seo-yeon"),
        ("Tanaka", "Suzuki", "Takahashi", "Watanabe", "Yamamoto", "Nakamura", "Kim", "Park", "Choi", "Jung"),
    ),
    ("vietnamese", ("Minh", "Linh", "Thanh", "Huong", "Quang"), ("Nguyen", "Tran", "Le", "Pham", "Hoang")),
    (
        "arabic-turkish",
        ("Omar", "Fatima", "Yusuf", "Layla", "Karim", "Noura", "Mehmet", "Elif", "Emre", "Zeynep"),
        ("Haddad", "Al-Rashid", "Khalil", "Mansour", "Farouk", "Yilmaz", "Demir", "Kaya", "Öztürk", "Aziz"),
    ),
    (
        "african",
        ("Chinedu", "Ngozi", "Oluwaseun", "Kwame", "Abena", "Wanjiru", "Tendai", "Amara", "Kofi", "Tigist"),
        ("Okafor", "Adeyemi", "Mensah", "Boateng", "Kamau", "Mwangi", "Okonkwo", "Abebe", "Nkosi", "Diallo"),
    ),
    (
        "hebrew-greek",
        ("Noa", "Eitan", "Yael", "Avi", "Nikos", "Eleni", "Dimitris", "Sofia"),
        ("Cohen", "Levi", "Mizrahi", "Friedman", "Papadopoulos", "Georgiou", "Konstantinou", "Alexiou"),
    ),
)
TITLES = {"f": ("Ms.", "Dr.", "Mrs."), "m": ("Mr.", "Dr.")}

# Companies (hard negatives: several carry a surname) and their e-mail domains on real TLDs.
COMPANIES: tuple[tuple[str, str], ...] = (
    ("Northwind Traders", "northwind.com"),
    ("Contoso", "contoso.com"),
    ("Fabrikam", "fabrikam.de"),
    ("Blue Harbor Capital", "blueharbor.org"),
    ("Hargreaves Logistics", "hargreaves-logistics.co.uk"),
    ("Whitfield & Co", "whitfield.co.uk"),
    ("Dubois Frères", "dubois-freres.fr"),
    ("Novak Systems", "novaksystems.cz"),
    ("Tanaka Precision", "tanaka-precision.co.jp"),
    ("Baker Brothers Ltd", "bakerbrothers.co.uk"),
    ("Alvarez Foods", "alvarezfoods.es"),
    ("Lindqvist Marine", "lindqvistmarine.se"),
    ("Sterling Analytics", "sterling-analytics.io"),
    ("Redwood Health", "redwoodhealth.org"),
    ("Orion Freight", "orionfreight.net"),
    ("Fischer Maschinenbau GmbH", "fischer-mb.de"),
    ("Kaya Tekstil", "kayatekstil.com.tr"),
    ("Meridian Bank", "meridianbank.ch"),
    ("Apex Dental Group", "apexdental.com.au"),
    ("Okafor Agritech", "okafor-agritech.ng"),
    ("Van Dijk Bouw", "vandijkbouw.nl"),
    ("Rossi Moda", "rossimoda.it"),
    ("Greenfield Energy", "greenfield-energy.com"),
    ("Silva Transportes", "silvatransportes.com.br"),
    ("Patel Pharma", "patelpharma.in"),
    ("Morgan Hale Consulting", "morganhale.com"),
)
FREEMAIL = ("gmail.com", "outlook.com", "yahoo.fr", "web.de", "gmx.de", "icloud.com", "proton.me", "hotmail.co.uk")
ROLES = ("billing", "support", "accounts.payable", "procurement", "it-helpdesk", "info", "finance")
CITIES = ("Berlin", "Rotterdam", "Lyon", "Leeds", "Austin", "Porto", "Osaka", "Pune", "Nairobi", "Gdańsk")
PRODUCTS = ("Atlas Pro", "Atlas Lite", "Sync Connector", "Analytics add-on", "Edge Gateway", "Vault backup")

# ---------------------------------------------------------------- sentence templates

# {P}/{P2}: a person (full name, or title + surname, or lower case); {FIRST}/{FIRST2}: first name
# only; {E}/{E2}: that person's e-mail; {EX}: a role address; {PH} phone; {CC} card; {IBAN}; {IP}
# IPv4; {IP6} IPv6; {SSN}. Everything else is a hard negative (see negative()).
PII_TEMPLATES: dict[str, tuple[str, ...]] = {
    "meeting": (
        "Met with {P} from {CO} on {DATE} to review the renewal.",
        "{P} (Head of Procurement at {CO}) wants the revised quote by {DATE}.",
        "Call with {P} and {P2}: they agreed to {QTY} seats at {PRICE} per year.",
        "{P} confirmed the budget; next step is a demo with {P2} on {DATE} at {TIME}.",
        "Action item: send the signed order form to {E} before {DATE}.",
        "Follow up with {P} ({E}, {PH}) about ticket {TKT}.",
        "New champion at {CO}: {P}, mobile {PH}.",
        "{P} asked us to stop calling {PH} and to use {E} instead.",
        "{P}'s team in {CITY} will pilot {PROD} from {DATE}.",
        "Lunch with {P} went well, {FIRST} wants a reference call with another {CO} customer.",
        "Decision maker is {P2}, not {P}; {P2} can be reached on {PH}.",
    ),
    "ticket": (
        "Customer {P} reports login failures from {IP} since {DATE}.",
        "Ticket {TKT}: user {E} locked out after 5 attempts from {IP}.",
        "Requests originate from {IP6}; {P} says the VPN was changed last week.",
        "Blocked {IP} after a spike of 4,000 requests per minute.",
        "{P} upgraded to {VER} and the sync job now fails with error 0x80070005.",
        "Refund for order {ORD} goes back to card {CC} ({P}).",
        "Card on file for {CO}: {CC}, expires 09/27.",
        "Payment failed: card {CC} was declined, {P} will call back on {PH}.",
        "Please wire the balance of {PRICE} to IBAN {IBAN} (account holder {P}).",
        "Updated bank details for {CO}: {IBAN}.",
        "Employee record for {P}: SSN {SSN}, start date {DATE}.",
        "W-9 received from {P}, social security number {SSN}.",
        "The taxpayer number {SSN} was entered twice for {P}.",
        "VPN tunnel from {IP} to {IP} drops every {MIN} minutes; {P} has the logs.",
        "Caller {P} gave {PH} as callback number and {E} for the case summary.",
        "{E} cannot open the invoice PDF; their proxy is {IP}.",
        "Chargeback on {CC} for {PRICE}, disputed by {P}.",
    ),
    "email": (
        "Hi {FIRST}, thanks for your time today.",
        "Dear {P}, please find the proposal for {CO} attached.",
        "From: {P} <{E}>",
        "Please reach me at {PH} or {E}.",
        "Cc {P2} ({E2}) on the contract thread.",
        "Regards, {P} | {CO} | {PH}",
        "Forwarding from {EX}: invoice {INV} is overdue.",
        "Best, {P2}",
        "Our remittance details: IBAN {IBAN}, reference {INV}.",
        "{FIRST2} from our finance team will send the credit note to {EX}.",
        "You can also pay by card; we have {CC} on file.",
    ),
}
NEGATIVE_TEMPLATES: tuple[str, ...] = (
    "Renewal for {CO} moves to {DATE}; list price {PRICE}.",
    "Order {ORD} shipped on {DATE}, tracking {TRK}.",
    "Upgrade to {VER} fixed the export bug reported in {TKT}.",
    "SKU {SKU} is back in stock, {QTY} units available at {PRICE}.",
    "Firmware {VER4} is pinned for all {CO} appliances.",
    "Invoice {INV} for {PRICE} is due on {DATE}.",
    "Quarterly review moved to {DATE} at {TIME}; agenda: pricing, seats, SSO.",
    "{CO} signed a three-year deal worth {PRICE}.",
    "Case {CASE} closed: root cause was a timeout in the webhook retry loop.",
    "Discount of {PCT} approved for {CO} until {DATE}.",
    "Meeting room B2-114 is booked for the {CO} workshop on {DATE}.",
    "Port 8443 must be open; the health check polls every {MIN} seconds.",
    "Ship {QTY} units of part {PART} to the {CITY} warehouse by {DATE}.",
    "Customer asked about GDPR retention; legal will answer by {DATE}.",
    "{CO} wants {PROD} on {VER} before the audit on {DATE}.",
    "Order {ORD} and order {ORD} were merged into {INV}.",
    "The {CITY} office of {CO} reported {QTY} active seats in {MONTH}.",
    "Build {VER} passed QA; release notes mention ticket {TKT}.",
)
STYLE_WEIGHTS = (("meeting", 35), ("ticket", 35), ("email", 30))
CLEAN_SHARE = 0.2  # notes with no personal data at all
NEGATIVE_SENTENCE_SHARE = 0.3  # in other notes, share of sentences that carry no personal data

# ---------------------------------------------------------------- generated values


@dataclass(frozen=True, slots=True)
class Gold:
    type: str
    start: int
    end: int
    variant: str


@dataclass(frozen=True, slots=True)
class Negative:
    kind: str  # ORDER, VERSION_4PART, COMPANY, ...
    start: int
    end: int


@dataclass(slots=True)
class Note:
    index: int
    style: str
    text: str
    gold: list[Gold] = field(default_factory=list)
    negatives: list[Negative] = field(default_factory=list)
    detected: tuple[Span, ...] = ()
    analyze_ms: float = 0.0


@dataclass(slots=True)
class Person:
    first: str
    last: str
    origin: str
    gender: str
    company: tuple[str, str]
    email: str = ""
    email_variant: str = ""


def ascii_fold(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return "".join(c for c in folded.lower() if c.isalnum() or c == "-")


def luhn_complete(body: str) -> str:
    """body + the check digit that makes it Luhn-valid."""
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:  # these digits are doubled once the check digit is appended
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return body + str((10 - total % 10) % 10)


def luhn_ok(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = sum(digits[-1::-2]) + sum(sum(divmod(2 * d, 10)) for d in digits[-2::-2])
    return total % 10 == 0


# Card issuers: (variant, prefixes, length, groupings)
CARDS: tuple[tuple[str, tuple[str, ...], int, tuple[tuple[int, ...], ...]], ...] = (
    ("visa", ("4",), 16, ((4, 4, 4, 4),)),
    ("mastercard 51-55", ("51", "52", "53", "54", "55"), 16, ((4, 4, 4, 4),)),
    ("mastercard 2221-2720", ("2221", "2300", "2500", "2720"), 16, ((4, 4, 4, 4),)),
    ("amex", ("34", "37"), 15, ((4, 6, 5),)),
    ("discover", ("6011", "65"), 16, ((4, 4, 4, 4),)),
    ("diners", ("36", "38"), 14, ((4, 6, 4),)),
    ("jcb", ("3528", "3540", "3589"), 16, ((4, 4, 4, 4),)),
)
CARD_WEIGHTS = (30, 20, 8, 15, 10, 7, 10)

# IBAN layouts: country -> BBAN as a sequence of (count, 'n' digits | 'a' upper letters | 'c' alphanumerics)
IBANS: dict[str, tuple[tuple[int, str], ...]] = {
    "DE": ((18, "n"),),
    "GB": ((4, "a"), (14, "n")),
    "FR": ((10, "n"), (11, "c"), (2, "n")),
    "NL": ((4, "a"), (10, "n")),
    "ES": ((20, "n"),),
    "IT": ((1, "a"), (10, "n"), (12, "c")),
    "CH": ((5, "n"), (12, "c")),
    "BE": ((12, "n"),),
    "AT": ((16, "n"),),
    "PL": ((24, "n"),),
    "SE": ((20, "n"),),
}

# Phone plans: region, country code, national significant number prefixes, allowed NSN lengths,
# weight. Candidates are drawn until libphonenumber calls them valid for that region.
PHONES: tuple[tuple[str, int, tuple[str, ...], tuple[int, ...], int], ...] = (
    ("US", 1, ("212", "415", "312", "617", "206", "303", "512", "646", "718", "305", "404", "202"), (10,), 30),
    ("CA", 1, ("416", "604", "514", "613"), (10,), 4),
    ("GB", 44, ("207", "203", "161", "131", "74", "75", "77", "78", "79"), (10,), 14),
    ("DE", 49, ("30", "89", "40", "151", "160", "170", "176"), (10, 11), 12),
    ("FR", 33, ("1", "4", "6", "7"), (9,), 8),
    ("NL", 31, ("20", "6"), (9,), 5),
    ("ES", 34, ("91", "93", "6"), (9,), 4),
    ("IT", 39, ("06", "02", "3"), (9, 10), 4),
    ("CH", 41, ("44", "79"), (9,), 3),
    ("IN", 91, ("98", "7"), (10,), 5),
    ("AU", 61, ("2", "4"), (9,), 4),
    ("JP", 81, ("3", "90"), (9, 10), 3),
    ("BR", 55, ("119", "21"), (10, 11), 4),
)
PRESIDIO_PHONE_REGIONS = ("US", "GB", "DE", "FR", "IL", "IN", "CA", "BR")  # PhoneRecognizer's defaults


class Maker:
    """Seeded generator of notes; every planted value is checked (Luhn, mod 97, libphonenumber)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.today = date(2026, 12, 1)

    # --- personal data
    def person(self) -> Person:
        origin, firsts, lasts = self.rng.choice(NAMES)
        first = self.rng.choice(firsts)
        gender = "f" if first in FEMALE else "m"
        return Person(first, self.rng.choice(lasts), origin, gender, self.rng.choice(COMPANIES))

    def email_of(self, p: Person) -> tuple[str, str]:
        if not p.email:
            first, last = ascii_fold(p.first.replace(" ", "")), ascii_fold(p.last.replace(" ", "").replace("'", ""))
            form = self.rng.choices(
                ("first.last", "flast", "first_last", "first", "first.last+tag", "First.Last"), weights=(40, 20, 10, 10, 8, 12)
            )[0]
            local = {
                "first.last": f"{first}.{last}",
                "flast": f"{first[0]}{last}",
                "first_last": f"{first}_{last}",
                "first": first,
                "first.last+tag": f"{first}.{last}+crm",
                "First.Last": f"{first.capitalize()}.{last.capitalize()}",
            }[form]
            domain = p.company[1] if self.rng.random() < 0.75 else self.rng.choice(FREEMAIL)
            p.email, p.email_variant = f"{local}@{domain}", f"{form} @.{domain.split('.', 1)[1]}"
        return p.email, p.email_variant

    def role_email(self) -> tuple[str, str]:
        domain = self.rng.choice(COMPANIES)[1]
        return f"{self.rng.choice(ROLES)}@{domain}", f"role @.{domain.split('.', 1)[1]}"

    def phone(self) -> tuple[str, str]:
        region, cc, prefixes, lengths, _ = self.rng.choices(PHONES, weights=[p[4] for p in PHONES])[0]
        for _ in range(1000):
            prefix = self.rng.choice(prefixes)
            if cc == 1:  # NXX exchange, never 555 (fictional) nor N11
                exchange = f"{self.rng.randint(2, 9)}{self.rng.randint(0, 9)}{self.rng.randint(0, 9)}"
                if exchange == "555" or exchange[1:] == "11":
                    continue
                nsn = prefix + exchange + f"{self.rng.randint(0, 9999):04d}"
            else:
                nsn = prefix + "".join(str(self.rng.randint(0, 9)) for _ in range(self.rng.choice(lengths) - len(prefix)))
            try:
                number = phonenumbers.parse(f"+{cc}{nsn}", None)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(number) and phonenumbers.region_code_for_number(number) == region:
                break
        else:
            raise SystemExit(f"no valid {region} number found")
        F = phonenumbers.PhoneNumberFormat
        national = phonenumbers.format_number(number, F.NATIONAL)
        international = phonenumbers.format_number(number, F.INTERNATIONAL)
        if cc == 1:
            digits10 = phonenumbers.national_significant_number(number)
            a, b, c = digits10[:3], digits10[3:6], digits10[6:]
            styles = {
                "national (NXX) NXX-XXXX": national,
                "dashed NXX-NXX-XXXX": f"{a}-{b}-{c}",
                "dotted NXX.NXX.XXXX": f"{a}.{b}.{c}",
                "intl +1 NXX-NXX-XXXX": international,
                "intl spaced +1 NXX NXX XXXX": f"+1 {a} {b} {c}",
                "E.164": phonenumbers.format_number(number, F.E164),
            }
            weights: tuple[int, ...] = (30, 20, 10, 20, 12, 8)
        elif region in PRESIDIO_PHONE_REGIONS:
            styles = {"national": national, "intl": international, "E.164": phonenumbers.format_number(number, F.E164)}
            weights = (40, 50, 10)
        else:
            styles = {"national": national, "intl": international, "E.164": phonenumbers.format_number(number, F.E164)}
            weights = (15, 70, 15)
        style = self.rng.choices(list(styles), weights=weights)[0]
        text = styles[style]
        check = phonenumbers.parse(text, region)
        if not phonenumbers.is_valid_number(check):
            raise SystemExit(f"generator bug: {text!r} is not a valid {region} number")
        return text, f"{region} {style}"

    def card(self) -> tuple[str, str]:
        issuer, prefixes, length, groupings = self.rng.choices(CARDS, weights=CARD_WEIGHTS)[0]
        prefix = self.rng.choice(prefixes)
        body = prefix + "".join(str(self.rng.randint(0, 9)) for _ in range(length - 1 - len(prefix)))
        number = luhn_complete(body)
        assert luhn_ok(number) and len(number) == length
        sep = self.rng.choices((" ", "-", ""), weights=(55, 20, 25))[0]
        if sep:
            groups, at = [], 0
            for size in groupings[0]:
                groups.append(number[at : at + size])
                at += size
            text = sep.join(groups)
        else:
            text = number
        return text, f"{issuer} {'spaces' if sep == ' ' else 'dashes' if sep == '-' else 'compact'}"

    def iban(self) -> tuple[str, str]:
        country = self.rng.choice(list(IBANS))
        pools = {"n": "0123456789", "a": "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "c": "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"}
        bban = "".join(self.rng.choice(pools[kind]) for count, kind in IBANS[country] for _ in range(count))
        numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
        check = 98 - int(numeric) % 97
        iban = f"{country}{check:02d}{bban}"
        moved = iban[4:] + iban[:4]
        assert int("".join(str(int(c, 36)) for c in moved)) % 97 == 1
        grouped = self.rng.random() < 0.6
        text = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4)) if grouped else iban
        return text, f"{country} {'grouped' if grouped else 'compact'}"

    def ipv4(self) -> tuple[str, str]:
        if self.rng.random() < 0.4:
            kind = self.rng.choice(("10", "192.168", "172"))
            r = self.rng.randint
            text = {
                "10": f"10.{r(0, 255)}.{r(0, 255)}.{r(1, 254)}",
                "192.168": f"192.168.{r(0, 255)}.{r(1, 254)}",
                "172": f"172.{r(16, 31)}.{r(0, 255)}.{r(1, 254)}",
            }[kind]
            return text, "IPv4 private"
        while True:
            a = self.rng.randint(1, 223)
            if a not in (10, 127, 172, 192):
                break
        return f"{a}.{self.rng.randint(0, 255)}.{self.rng.randint(0, 255)}.{self.rng.randint(1, 254)}", "IPv4 public"

    def ipv6(self) -> tuple[str, str]:
        groups = [self.rng.choice(("2001", "2a00", "2600", "2a02", "2607"))] + [
            f"{self.rng.randint(0, 0xFFFF):x}" for _ in range(7)
        ]
        if self.rng.random() < 0.6:
            return ":".join(groups[:3]) + "::" + ":".join(groups[6:]), "IPv6 compressed"
        return ":".join(groups), "IPv6 full"

    def ssn(self) -> tuple[str, str]:
        while True:
            area = self.rng.randint(1, 899)
            if area != 666:
                break
        text = f"{area:03d}-{self.rng.randint(1, 99):02d}-{self.rng.randint(1, 9999):04d}"
        return text, "SSN dashed"

    # --- hard negatives
    def negative(self, kind: str) -> str:
        r, c = self.rng.randint, self.rng.choice
        if kind == "CO":
            return c(COMPANIES)[0]
        if kind == "DATE":
            d = self.today + timedelta(days=r(-400, 200))
            return c(
                (
                    d.isoformat(),
                    d.strftime("%d/%m/%Y"),
                    d.strftime("%B %d, %Y").replace(" 0", " "),
                    d.strftime("%d.%m.%Y"),
                    d.strftime("%m/%d/%Y"),
                    d.strftime("%d %b %Y"),
                )
            )
        if kind == "PRICE":
            return c(
                (
                    f"${r(1, 99)},{r(0, 999):03d}.00",
                    f"EUR {r(1, 99)}.{r(0, 999):03d},00",
                    f"£{r(1, 80)},{r(0, 9) * 100:03d}",
                    f"USD {r(5, 900) * 100}",
                    f"${r(10, 999)}.{r(0, 99):02d}",
                )
            )
        if kind == "ORD":
            return c(
                (
                    f"#{r(100000, 99999999)}",
                    f"PO-{r(100000, 999999)}",
                    f"{r(2023, 2026)}{r(1, 12):02d}{r(1, 28):02d}-{r(1000, 9999)}",
                    f"SO{r(10**9, 10**10 - 1)}",
                )
            )
        if kind == "INV":
            return c((f"INV-{r(2024, 2026)}-{r(1, 99999):05d}", f"INV{r(100000, 999999)}", f"CN-{r(1000, 9999)}"))
        if kind == "TKT":
            return c((f"#{r(10000, 99999)}", f"CRM-{r(100, 9999)}", f"SUP-{r(1000, 99999)}"))
        if kind == "CASE":
            return c((f"{r(10**7, 10**8 - 1):08d}", f"{r(2024, 2026)}-{r(1, 12):02d}{r(10, 28)}-{r(100, 999)}"))
        if kind == "SKU":
            return c(
                (f"{c('ABCDEFGH')}{c('KLMNPRST')}-{r(1000, 9999)}-{c('ABCX')}", f"{r(100, 999)}-{r(10, 99)}-{r(1000, 9999)}")
            )
        if kind == "PART":
            return c(
                (
                    f"{r(1000, 9999)}-{r(100, 999)}-{r(10, 99)}",
                    f"P/N {r(10**5, 10**6 - 1)}",
                    f"X{r(100, 999)}-{c('ABCD')}{r(1, 9)}",
                )
            )
        if kind == "VER":
            return c(
                (
                    f"v{r(1, 9)}.{r(0, 30)}.{r(0, 20)}",
                    f"{r(1, 12)}.{r(0, 9)}",
                    f"{r(1, 9)}.{r(0, 20)}.{r(0, 9)}-rc{r(1, 4)}",
                    f"version {r(2, 9)}.{r(0, 9)}.{r(0, 9)}.{r(1000, 9999)}",
                )
            )
        if kind == "VER4":  # a four-part version string that is also a syntactically valid IPv4 address
            return f"{r(1, 9)}.{r(0, 20)}.{r(0, 9)}.{r(1, 250)}"
        if kind == "TRK":
            return c(
                (f"1Z{r(100, 999)}{c('ABCDEFXY')}{c('ABCDEFXY')}{r(10**9, 10**10 - 1)}{r(0, 9)}", f"{r(10**11, 10**12 - 1)}")
            )
        if kind == "QTY":
            return c((str(r(5, 900)), f"{r(1, 40)},{r(0, 9)}00"))
        if kind == "TIME":
            return c((f"{r(8, 17)}:{c(('00', '15', '30', '45'))}", f"{r(8, 11)}:{c(('00', '30'))} am CET", f"{r(1, 5)} pm"))
        if kind == "PCT":
            return f"{r(3, 30)}%"
        if kind == "MIN":
            return str(r(2, 90))
        if kind == "CITY":
            return c(CITIES)
        if kind == "PROD":
            return c(PRODUCTS)
        if kind == "MONTH":
            return c(("January", "March", "May", "August", "October", "December"))
        raise KeyError(kind)

    # --- notes
    def note(self, index: int) -> Note:
        clean = self.rng.random() < CLEAN_SHARE
        style = self.rng.choices([s for s, _ in STYLE_WEIGHTS], weights=[w for _, w in STYLE_WEIGHTS])[0]
        count = self.rng.choices((1, 2, 3, 4), weights=(20, 35, 30, 15))[0]
        templates = []
        for i in range(count):
            if clean or (i > 0 and self.rng.random() < NEGATIVE_SENTENCE_SHARE):
                templates.append(self.rng.choice(NEGATIVE_TEMPLATES))
            else:
                templates.append(self.rng.choice(PII_TEMPLATES[style]))
        people = [self.person(), self.person()]
        for p in people:  # a note about one company: most people work there
            p.company = people[0].company
        note = Note(index, "clean" if clean else style, "")
        parts: list[str] = []
        length = 0

        def put(value: str, gold: tuple[str, str] | None = None, negative: str | None = None) -> None:
            nonlocal length
            if gold:
                note.gold.append(Gold(gold[0], length, length + len(value), gold[1]))
            if negative:
                note.negatives.append(Negative(negative, length, length + len(value)))
            parts.append(value)
            length += len(value)

        # The placeholders whose value is drawn alone (no person in it), with the type it is labelled as.
        values: dict[str, tuple[Callable[[], tuple[str, str]], str]] = {
            "PH": (self.phone, "PHONE_NUMBER"),
            "CC": (self.card, "CREDIT_CARD"),
            "IBAN": (self.iban, "IBAN_CODE"),
            "IP": (self.ipv4, "IP_ADDRESS"),
            "IP6": (self.ipv6, "IP_ADDRESS"),
            "SSN": (self.ssn, "US_SSN"),
        }
        for t, template in enumerate(templates):
            if t:
                put("\n" if style == "email" and not clean else " ")
            for piece in split_template(template):
                if not (piece.startswith("{") and piece.endswith("}")):
                    put(piece)
                    continue
                token = piece[1:-1]
                p = people[1] if token.endswith("2") else people[0]
                base = token.rstrip("2")
                if base == "P":
                    self.put_person(put, p)
                elif base == "FIRST":
                    put(p.first, ("PERSON", "first name only"))
                elif base == "E":
                    put(*pair(self.email_of(p), "EMAIL_ADDRESS"))
                elif base == "EX":
                    value, variant = self.role_email()
                    put(value, ("EMAIL_ADDRESS", variant))
                elif base in values:
                    make, kind = values[base]
                    put(*pair(make(), kind))
                elif base == "CO":
                    put(p.company[0] if self.rng.random() < 0.7 else self.negative("CO"), negative="COMPANY")
                else:
                    put(self.negative(base), negative={"VER4": "VERSION_4PART"}.get(base, base))
        note.text = "".join(parts)
        for g in note.gold:
            assert 0 <= g.start < g.end <= len(note.text)
        return note

    def put_person(self, put: Callable[..., None], p: Person) -> None:
        form = self.rng.choices(("full", "title", "lower"), weights=(82, 12, 6))[0]
        if form == "title":
            put(self.rng.choice(TITLES[p.gender]) + " ")
            put(p.last, ("PERSON", f"title + surname ({p.origin})"))
        elif form == "lower":
            put(f"{p.first} {p.last}".lower(), ("PERSON", f"lower case ({p.origin})"))
        else:
            put(f"{p.first} {p.last}", ("PERSON", f"full name ({p.origin})"))


FEMALE = {
    "Mary",
    "Patricia",
    "Jennifer",
    "Linda",
    "Elizabeth",
    "Sarah",
    "Emily",
    "Rebecca",
    "Charlotte",
    "Siobhan",
    "Niamh",
    "Aoife",
    "Fiona",
    "Mairead",
    "Anna",
    "Katrin",
    "Sabine",
    "Ursula",
    "Henrike",
    "Camille",
    "Élodie",
    "Céline",
    "Margaux",
    "Sylvie",
    "María",
    "Lucía",
    "Carmen",
    "Valentina",
    "Gabriela",
    "Giulia",
    "Francesca",
    "Chiara",
    "Federica",
    "Ana",
    "Beatriz",
    "Larissa",
    "Katarzyna",
    "Agnieszka",
    "Olga",
    "Natalia",
    "Oksana",
    "Ingrid",
    "Astrid",
    "Freya",
    "Sanne",
    "Aino",
    "Priya",
    "Ananya",
    "Deepika",
    "Sunita",
    "Kavya",
    "Lakshmi",
    "Li Na",
    "Mei",
    "Yan",
    "Jing",
    "Yuki",
    "Sakura",
    "Aiko",
    "Seo-yeon",
    "Ji-woo",
    "Linh",
    "Huong",
    "Fatima",
    "Layla",
    "Noura",
    "Elif",
    "Zeynep",
    "Ngozi",
    "Abena",
    "Wanjiru",
    "Amara",
    "Tigist",
    "Noa",
    "Yael",
    "Eleni",
    "Sofia",
}


def pair(value: tuple[str, str], kind: str) -> tuple[str, tuple[str, str]]:
    return value[0], (kind, value[1])


def split_template(template: str) -> list[str]:
    out, at = [], 0
    while at < len(template):
        start = template.find("{", at)
        if start < 0:
            out.append(template[at:])
            break
        end = template.index("}", start)
        if start > at:
            out.append(template[at:start])
        out.append(template[start : end + 1])
        at = end + 1
    return out


def generate(count: int, seed: int) -> list[Note]:
    maker = Maker(seed)
    return [maker.note(i) for i in range(count)]


# ---------------------------------------------------------------- quality


@dataclass(slots=True)
class Scored:
    support: Counter[str] = field(default_factory=Counter)
    detected: Counter[str] = field(default_factory=Counter)
    tp: Counter[str] = field(default_factory=Counter)
    exact: Counter[str] = field(default_factory=Counter)
    masked: Counter[str] = field(default_factory=Counter)  # gold fully covered by detected spans of any type
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)  # (gold type, detected type)
    fp_kind: Counter[tuple[str, str]] = field(default_factory=Counter)  # (detected type, wrong type/partial/spurious)
    fp_source: Counter[tuple[str, str]] = field(default_factory=Counter)  # (detected type, negative kind or 'template text')
    variant_support: Counter[tuple[str, str]] = field(default_factory=Counter)
    variant_tp: Counter[tuple[str, str]] = field(default_factory=Counter)
    misses: dict[str, list[tuple[Note, Gold, list[Span]]]] = field(default_factory=lambda: defaultdict(list))
    false_positives: dict[str, list[tuple[Note, Span, str]]] = field(default_factory=lambda: defaultdict(list))
    clean_notes: int = 0
    clean_flagged: int = 0
    spacy_labels: Counter[str] = field(default_factory=Counter)  # what the NER model made of missed names


def label_missed_names(detector: Detector, s: Scored) -> None:
    """For each missed PERSON, the label of spaCy's entity over it (ORG, GPE, ...) or `no entity`:
    whether the model saw a name of another kind or nothing at all."""
    nlp = detector._analyzer.nlp_engine.nlp["en"]
    docs: dict[int, Any] = {}
    for note, g, _ in s.misses.get("PERSON", []):
        if note.index not in docs:
            docs[note.index] = nlp(note.text)
        labels = [e.label_ for e in docs[note.index].ents if e.start_char < g.end and g.start < e.end_char]
        s.spacy_labels[labels[0] if labels else "no entity"] += 1


def overlap(a_start: int, a_end: int, b_start: int, b_end: int) -> int:
    return max(0, min(a_end, b_end) - max(a_start, b_start))


def score(notes: Sequence[Note]) -> Scored:
    """Match rule: a detected span matches a gold span when it covers >= 50% of the gold span's
    characters. Pairs are assigned one to one, same-type pairs first, then by overlap; a gold span
    matched only by a span of another type is a confusion (a miss for its type, a false positive for
    the detected type)."""
    s = Scored()
    for note in notes:
        detected = [d for d in note.detected if d.type != LITERAL]
        if not note.gold:
            s.clean_notes += 1
            s.clean_flagged += bool(detected)
        for g in note.gold:
            s.support[g.type] += 1
            s.variant_support[(g.type, g.variant)] += 1
            covered: set[int] = set()
            for d in detected:
                covered.update(range(max(g.start, d.start), min(g.end, d.end)))
            s.masked[g.type] += len(covered) == g.end - g.start
        for d in detected:
            s.detected[d.type] += 1
        pairs = []
        for gi, g in enumerate(note.gold):
            for di, d in enumerate(detected):
                ov = overlap(g.start, g.end, d.start, d.end)
                if ov >= MATCH_OVERLAP * (g.end - g.start):
                    pairs.append((g.type != d.type, -ov, gi, di))
        gold_used: dict[int, int] = {}
        det_used: set[int] = set()
        for _, _, gi, di in sorted(pairs):
            if gi in gold_used or di in det_used:
                continue
            gold_used[gi] = di
            det_used.add(di)
        for gi, g in enumerate(note.gold):
            assigned = gold_used.get(gi)
            match = detected[assigned] if assigned is not None else None
            if match is not None and match.type == g.type:
                s.tp[g.type] += 1
                s.variant_tp[(g.type, g.variant)] += 1
                s.exact[g.type] += (match.start, match.end) == (g.start, g.end)
            else:
                if match is not None:
                    s.confusion[(g.type, match.type)] += 1
                near = [x for x in detected if overlap(g.start, g.end, x.start, x.end)]
                s.misses[g.type].append((note, g, near))
        for di, d in enumerate(detected):
            matched_gold = [g for gi, g in enumerate(note.gold) if gold_used.get(gi) == di]
            if matched_gold and matched_gold[0].type == d.type:
                continue
            if matched_gold:
                kind = "wrong type"
            elif any(overlap(g.start, g.end, d.start, d.end) for g in note.gold):
                kind = "partial/extra"
            else:
                kind = "spurious"
            s.fp_kind[(d.type, kind)] += 1
            if kind == "spurious":
                sources = [n.kind for n in note.negatives if overlap(n.start, n.end, d.start, d.end)]
                s.fp_source[(d.type, sources[0] if sources else "template text")] += 1
            s.false_positives[d.type].append((note, d, kind))
    return s


def prf(tp: int, detected: int, support: int) -> tuple[float, float, float]:
    precision = tp / detected if detected else float("nan")
    recall = tp / support if support else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if detected and support and (precision + recall) else float("nan")
    return precision, recall, f1


def excerpt(text: str, start: int, end: int, width: int = 50) -> str:
    left = max(0, start - width)
    right = min(len(text), end + width)
    return (
        ("…" if left else "")
        + text[left:start]
        + "[["
        + text[start:end]
        + "]]"
        + text[end:right]
        + ("…" if right < len(text) else "")
    ).replace("\n", " ")


# ---------------------------------------------------------------- speed


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def analyze_all(detector: Detector, notes: list[Note]) -> dict[str, float]:
    """Analyse every note (warm: one call before), interleaved with spaCy's pipeline alone on the same
    text, alternating which goes first, so both see the same machine load."""
    nlp = detector._analyzer.nlp_engine.nlp["en"]
    detector.analyze("Warm-up: Jane Roe, jane.roe@contoso.com, +1 415 867 2391.")
    nlp("Warm-up text.")
    spacy_s = 0.0
    analyze_s = 0.0
    for i, note in enumerate(notes):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            started = time.perf_counter()
            if which == 0:
                note.detected = detector.analyze(note.text)
                note.analyze_ms = (time.perf_counter() - started) * 1000
                analyze_s += note.analyze_ms / 1000
            else:
                nlp(note.text)
                spacy_s += time.perf_counter() - started
    size = sum(len(n.text.encode()) for n in notes)
    per_note = [n.analyze_ms for n in notes]
    return {
        "bytes": size,
        "analyze_s": analyze_s,
        "spacy_s": spacy_s,
        "kb_s": size / 1000 / analyze_s,
        "spacy_kb_s": size / 1000 / spacy_s,
        "ratio_vs_spacy": analyze_s / spacy_s,
        "note_p50_ms": percentile(per_note, 50),
        "note_p95_ms": percentile(per_note, 95),
    }


def pack_contexts(notes: list[Note], count: int, limit: int, seed: int) -> list[list[Note]]:
    """Contexts of whole notes up to `limit` UTF-8 bytes (an item is never cut), each from a seeded
    shuffle of the whole set; a note that does not fit is skipped, as the budget packer does."""
    rng = random.Random(seed + 1)
    sizes = {n.index: len(n.text.encode()) for n in notes}
    smallest = min(sizes.values())
    contexts = []
    for _ in range(count):
        order = rng.sample(notes, len(notes))
        used, packed = 0, []
        for note in order:
            if used + sizes[note.index] <= limit:
                packed.append(note)
                used += sizes[note.index]
            if limit - used < smallest:
                break
        contexts.append(packed)
    return contexts


def time_masking(contexts: list[list[Note]], rounds_warm: int = 10) -> dict[str, list[float]]:
    """Per context, ms for: copying every item's text (the baseline), masking with spans already
    decoded, and decoding the stored JSON spans then masking (what a retrieve does with rows from the
    store); a fresh Masker per context, all its items in one `mask_many` pass as `Masking.apply`
    does. The three run back to back per context, in rotating order."""
    items = [[(n.text, n.detected, [s.as_json() for s in n.detected]) for n in ctx] for ctx in contexts]

    def copy(ctx: list[tuple[str, tuple[Span, ...], list[list[Any]]]]) -> list[str]:
        return ["".join((text, "")) for text, _, _ in ctx]

    def mask(ctx: list[tuple[str, tuple[Span, ...], list[list[Any]]]]) -> list[str]:
        # What `Masking.apply` does: every value registered, each text masked with its own spans and
        # every value found elsewhere in the context (one mask per value).
        ids = [str(i) for i in range(len(ctx))]
        masking = Masking(
            Masker(), {i: spans for i, (_, spans, _) in zip(ids, ctx)}, {i: text for i, (text, _, _) in zip(ids, ctx)}
        )
        return masking.texts(ids, frozenset())

    def decode_mask(ctx: list[tuple[str, tuple[Span, ...], list[list[Any]]]]) -> list[str]:
        return Masker().mask_many([(text, tuple(Span.from_json(v) for v in stored)) for text, _, stored in ctx])

    methods = (("copy", copy), ("mask", mask), ("decode+mask", decode_mask))
    for ctx in items[:rounds_warm]:
        for _, fn in methods:
            fn(ctx)
    out: dict[str, list[float]] = {name: [] for name, _ in methods}
    for i, ctx in enumerate(items):
        rotation = methods[i % 3 :] + methods[: i % 3]
        for name, fn in rotation:
            started = time.perf_counter_ns()
            fn(ctx)
            out[name].append((time.perf_counter_ns() - started) / 1e6)
    # sanity: every item of the first context masks and restores exactly
    masker = Masker()
    for text, spans, _ in items[0]:
        if spans and masker.restore(masker.mask(text, spans), frozenset(ENTITY_TYPES)) != text:
            raise SystemExit(f"mask/restore round trip failed on {text!r}")
    return out


def time_reanalysis(detector: Detector, contexts: list[list[Note]]) -> dict[str, list[float]]:
    """Request-time analysis of whole 16 KB contexts: every item analysed separately (what a retrieve
    would do without stored spans), and the items joined into one call (a lower bound)."""
    per_item, joined = [], []
    for ctx in contexts:
        started = time.perf_counter()
        for note in ctx:
            detector.analyze(note.text)
        per_item.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        detector.analyze("\n\n".join(n.text for n in ctx))
        joined.append((time.perf_counter() - started) * 1000)
    return {"per_item": per_item, "joined": joined}


# ---------------------------------------------------------------- report


def machine() -> str:
    try:
        load = ", load average %.2f" % os.getloadavg()[0]
    except OSError:
        load = ""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs{f' ({model})' if model else ''}, Python {platform.python_version()}{load}"


def report(
    args: argparse.Namespace,
    notes: list[Note],
    s: Scored,
    speed: dict[str, float],
    load_s: float,
    contexts: list[list[Note]],
    timing: dict[str, list[float]],
    reanalysis: dict[str, list[float]],
    code: str,
) -> None:
    from importlib.metadata import version

    print(
        f"\n=== PII benchmark: {len(notes):,} notes ({speed['bytes'] / 1000:,.1f} KB, {sum(len(n.gold) for n in notes):,} planted values, "
        f"{s.clean_notes} notes without personal data), seed {args.seed}, presidio-analyzer {version('presidio-analyzer')}, "
        f"spaCy {version('spacy')}, code {code}, {machine()} ==="
    )
    print(
        f"match rule: same type and the detected span covers >= {MATCH_OVERLAP:.0%} of the gold span's characters, one to one; "
        "exact = identical boundaries; masked = every character of the gold value inside some detected span (any type)"
    )
    header = f"{'type':<14} {'support':>7} {'detected':>8} {'TP':>5} {'precision':>9} {'recall':>6} {'F1':>6} {'exact':>6} {'masked':>7}"
    print(header)
    rows = {}
    total: Counter[str] = Counter()
    for kind in ENTITY_TYPES:
        sup, det, tp = s.support[kind], s.detected[kind], s.tp[kind]
        p, r, f = prf(tp, det, sup)
        rows[kind] = {
            "support": sup,
            "detected": det,
            "tp": tp,
            "precision": p,
            "recall": r,
            "f1": f,
            "exact_recall": s.exact[kind] / sup if sup else float("nan"),
            "masked": s.masked[kind] / sup if sup else float("nan"),
        }
        total.update({"support": sup, "detected": det, "tp": tp, "exact": s.exact[kind], "masked": s.masked[kind]})
        print(
            f"{kind:<14} {sup:>7} {det:>8} {tp:>5} {p:>9.3f} {r:>6.3f} {f:>6.3f} {rows[kind]['exact_recall']:>6.3f} {rows[kind]['masked']:>7.3f}"
        )
    p, r, f = prf(total["tp"], total["detected"], total["support"])
    micro = {
        "support": total["support"],
        "detected": total["detected"],
        "tp": total["tp"],
        "precision": p,
        "recall": r,
        "f1": f,
        "exact_recall": total["exact"] / total["support"],
        "masked": total["masked"] / total["support"],
    }
    print(
        f"{'all (micro)':<14} {total['support']:>7} {total['detected']:>8} {total['tp']:>5} {p:>9.3f} {r:>6.3f} {f:>6.3f} "
        f"{micro['exact_recall']:>6.3f} {micro['masked']:>7.3f}"
    )
    print(f"notes without personal data flagged: {s.clean_flagged}/{s.clean_notes}")
    if s.confusion:
        print("cross-type (gold -> detected as): " + ", ".join(f"{g} -> {d}: {n}" for (g, d), n in s.confusion.most_common()))
    else:
        print("cross-type (gold -> detected as): none")
    if s.fp_kind:
        print("false positives by kind: " + ", ".join(f"{t} {k}: {n}" for (t, k), n in sorted(s.fp_kind.items())))
    if s.fp_source:
        print("spurious detections by what they hit: " + ", ".join(f"{t} on {k}: {n}" for (t, k), n in s.fp_source.most_common()))
    print("recall by variant, other than PERSON (variants below 1.000, worst first; support in brackets):")
    weak = sorted(
        (s.variant_tp[(kind, variant)] / sup, kind, variant, sup)
        for (kind, variant), sup in s.variant_support.items()
        if kind != "PERSON" and s.variant_tp[(kind, variant)] < sup
    )
    if not weak:
        print("  none")
    for rec, kind, variant, sup in weak[: args.variants]:
        print(f"  {kind:<14} {variant:<40} {rec:5.3f} ({sup})")
    if len(weak) > args.variants:
        print(f"  ... {len(weak) - args.variants} more (raise --variants)")
    by_form: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_origin: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (kind, variant), sup in s.variant_support.items():
        if kind != "PERSON":
            continue
        form, _, origin = variant.partition(" (")
        for bucket in [by_form[form]] + ([by_origin[origin.rstrip(")")]] if form == "full name" else []):
            bucket[0] += s.variant_tp[(kind, variant)]
            bucket[1] += sup
    print("PERSON recall by form: " + ", ".join(f"{form} {tp / sup:.3f} ({sup})" for form, (tp, sup) in sorted(by_form.items())))
    print(
        "PERSON full names by origin: "
        + ", ".join(
            f"{origin} {tp / sup:.2f} ({sup})"
            for origin, (tp, sup) in sorted(by_origin.items(), key=lambda x: -x[1][0] / x[1][1])
        )
    )
    if s.spacy_labels:
        print(
            "missed PERSON values as spaCy's model labelled them (PERSON: it tagged only a part, under half, of the name): "
            + ", ".join(f"{label} {n}" for label, n in s.spacy_labels.most_common())
        )

    if args.show:
        for kind in ENTITY_TYPES:
            misses = s.misses.get(kind, [])
            fps = s.false_positives.get(kind, [])
            if not misses and not fps:
                continue
            print(f"-- {kind}: {len(misses)} missed, {len(fps)} false positive(s)")
            for note, g, near in misses[: args.show]:
                seen = "; ".join(f"{d.type} {note.text[d.start : d.end]!r}" for d in near) or "nothing detected there"
                print(f"   miss [{g.variant}] {excerpt(note.text, g.start, g.end)}  -> {seen}")
            for note, d, kind_ in fps[: args.show]:
                print(f"   false positive ({kind_}, score {d.score:.2f}) {excerpt(note.text, d.start, d.end)}")

    print(
        f"\nanalysis (warm, sequential, 1 thread): {speed['kb_s']:.2f} KB/s over {speed['bytes'] / 1000:,.1f} KB "
        f"({speed['analyze_s']:.1f} s); per note p50 {speed['note_p50_ms']:.1f} ms, p95 {speed['note_p95_ms']:.1f} ms; "
        f"spaCy pipeline alone on the same notes {speed['spacy_kb_s']:.2f} KB/s -> analyze = {speed['ratio_vs_spacy']:.2f}x spaCy alone; "
        f"analyzer load {load_s:.1f} s"
    )
    ctx_bytes = [sum(len(n.text.encode()) for n in ctx) for ctx in contexts]
    ctx_items = [len(ctx) for ctx in contexts]
    ctx_spans = [sum(len(n.detected) for n in ctx) for ctx in contexts]
    copy_p50 = percentile(timing["copy"], 50)
    print(
        f"masking: {len(contexts)} contexts of whole notes packed to {args.context_bytes:,} bytes (mean {statistics.mean(ctx_bytes):,.0f} B, "
        f"{statistics.mean(ctx_items):.0f} items, {statistics.mean(ctx_spans):.0f} stored spans), fresh Masker per context:"
    )
    print(f"  {'':<26} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'p50 vs copy':>12}")
    for name, label in (
        ("copy", "copy texts (baseline)"),
        ("mask", "mask (spans decoded)"),
        ("decode+mask", "decode JSON spans + mask"),
    ):
        v = timing[name]
        print(
            f"  {label:<26} {percentile(v, 50):>8.3f} {percentile(v, 95):>8.3f} {max(v):>8.3f} {percentile(v, 50) / copy_p50:>11.1f}x"
        )
    mask_p95 = percentile(timing["mask"], 95)
    decode_p95 = percentile(timing["decode+mask"], 95)
    verdict = "MET" if mask_p95 < args.target_ms else "MISSED"
    print(
        f"  target masking adds < {args.target_ms:g} ms to a 16 KB retrieve (p95): {verdict} "
        f"(mask p95 {mask_p95:.3f} ms; with decoding the stored spans {decode_p95:.3f} ms: "
        f"{'MET' if decode_p95 < args.target_ms else 'MISSED'})"
    )
    per_item = reanalysis["per_item"]
    joined = reanalysis["joined"]
    mask_p50 = percentile(timing["mask"], 50)
    if per_item:
        print(
            f"  re-analysing at request time instead ({len(per_item)} of the contexts): every item {statistics.mean(per_item):,.0f} ms mean "
            f"(max {max(per_item):,.0f}), one joined call {statistics.mean(joined):,.0f} ms mean -> "
            f"{statistics.mean(per_item) / mask_p50:,.0f}x the mask p50; spans are stored at ingest for this reason"
        )

    summary = {
        "bench": "pii",
        "notes": len(notes),
        "planted": total["support"],
        "clean_notes": s.clean_notes,
        "clean_flagged": s.clean_flagged,
        "seed": args.seed,
        "match": f"same type, >= {MATCH_OVERLAP:g} of gold covered",
        "types": {
            k: {m: (round(v, 4) if isinstance(v, float) else v) for m, v in row.items()}
            for k, row in rows.items()
            if row["support"] or row["detected"]
        },
        "micro": {m: (round(v, 4) if isinstance(v, float) else v) for m, v in micro.items()},
        "confusions": {f"{g}->{d}": n for (g, d), n in s.confusion.items()},
        "analyze_kb_s": round(speed["kb_s"], 2),
        "analyze_vs_spacy": round(speed["ratio_vs_spacy"], 2),
        "note_p50_ms": round(speed["note_p50_ms"], 2),
        "mask16k": {
            "contexts": len(contexts),
            "p50_ms": round(mask_p50, 4),
            "p95_ms": round(mask_p95, 4),
            "decode_p95_ms": round(decode_p95, 4),
            "copy_p50_ms": round(copy_p50, 4),
            "p50_vs_copy": round(mask_p50 / copy_p50, 1),
            "target_ms": args.target_ms,
            "target": verdict,
        },
        "reanalyze16k_ms": round(statistics.mean(per_item), 1) if per_item else None,
        "code": code,
        "cpus": os.cpu_count(),
        "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    print(json.dumps(summary, separators=(",", ":")))


def save(path: Path, notes: list[Note]) -> None:
    path.write_text(
        json.dumps(
            [
                {
                    "text": n.text,
                    "style": n.style,
                    "gold": [[g.type, g.start, g.end, g.variant] for g in n.gold],
                    "negatives": [[x.kind, x.start, x.end] for x in n.negatives],
                    "detected": [s.as_json() for s in n.detected],
                }
                for n in notes
            ],
            ensure_ascii=False,
            indent=0,
        )
    )
    print(f"labelled notes and detections written to {path}")


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notes", type=int, default=NOTES, help=f"labelled notes to generate and analyse (default {NOTES})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"data seed (default {SEED})")
    parser.add_argument("--contexts", type=int, default=CONTEXTS, help=f"16 KB contexts to mask (default {CONTEXTS})")
    parser.add_argument(
        "--context-bytes", type=int, default=CONTEXT_BYTES, help=f"context size in UTF-8 bytes (default {CONTEXT_BYTES})"
    )
    parser.add_argument(
        "--reanalyze", type=int, default=REANALYZE, help=f"contexts analysed again at request time (default {REANALYZE}; 0 skips)"
    )
    parser.add_argument(
        "--target-ms", type=float, default=TARGET_MS, help=f"masking target, p95 ms per context (default {TARGET_MS:g})"
    )
    parser.add_argument("--show", type=int, default=SHOW, help=f"misses and false positives printed per type (default {SHOW})")
    parser.add_argument("--variants", type=int, default=25, help="weakest variants listed (default 25)")
    parser.add_argument("--save", type=Path, help="write the labelled notes with their detections as JSON")
    args = parser.parse_args(argv)
    if args.notes < 1 or args.contexts < 1 or args.context_bytes < 1000 or args.reanalyze < 0 or args.show < 0:
        parser.error(
            "--notes and --contexts must be positive, --context-bytes at least 1000, --reanalyze and --show not negative"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    notes = generate(args.notes, args.seed)
    print(f"Generated {len(notes):,} notes; loading the analyzer...", flush=True)
    started = time.perf_counter()
    _analyzer()
    detector = Detector()
    load_s = time.perf_counter() - started
    code = code_revision()
    print(f"Analysing {len(notes):,} notes (and spaCy alone on each, for the baseline)...", flush=True)
    speed = analyze_all(detector, notes)
    scored = score(notes)
    label_missed_names(detector, scored)
    contexts = pack_contexts(notes, args.contexts, args.context_bytes, args.seed)
    print(
        f"Masking {len(contexts)} contexts of {args.context_bytes:,} bytes; re-analysing {min(args.reanalyze, len(contexts))}...",
        flush=True,
    )
    gc.collect()
    timing = time_masking(contexts)
    reanalysis = time_reanalysis(detector, contexts[: args.reanalyze])
    report(args, notes, scored, speed, load_s, contexts, timing, reanalysis, code)
    if args.save:
        save(args.save, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
