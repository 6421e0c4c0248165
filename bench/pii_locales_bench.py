"""PII across locales: how well `gateway.privacy.detect.Detector` finds personal data in English
running text about people, companies and accounts of 14 countries.

Generates a seeded, labelled set of notes (CRM notes, support tickets, e-mails, meeting minutes; 16
templates with personal data, 10 without) per Faker locale, with every planted value at exact
character offsets:

- people from names-dataset (the top first names by gender and top last names of the locale's
  country, in the script the data set gives: Cyrillic for Russia, kanji or romaji for Japan), never
  from Faker, whose name lists are the service's gazetteer: "First Last", first name alone, surname
  alone, with a title ("Dr. X", "Mr X", "Frau X", "X-san"), lower case, after cues ("Dear", "Hi",
  "signed,");
- phone numbers from Faker's `phone_number()` of the locale (redrawn until libphonenumber calls them
  valid for that country) and the same numbers in international forms with unusual grouping;
  e-mail addresses (Faker's, and ones made from the person's name); IBANs of the locale's country
  (or a foreign one where the country has none); IPv4/IPv6; US SSNs (Faker en_US); Luhn-valid cards
  of every major scheme and length, with and without separators;
- hard negatives everywhere (company names from Faker, products, prices, dates, versions, four-part
  "IP-like" versions, SKUs, PO, ticket, invoice and long order numbers).

Then analyses every note with `Detector().analyze_many` (batched, as the service does), and reports
per type support / TP / FP / FN / precision / recall / leaked, per-locale recall, the weakest value
variants, the share of clean notes with any span, throughput, and MET/MISSED against the targets.

Run from the project root with the project's venv (names-dataset comes with the `bench` extra):

    .venv/bin/python bench/pii_locales_bench.py                          # ~1-1.5 min on 2 cores
    .venv/bin/python bench/pii_locales_bench.py --per-locale 20 --clean-per-locale 10 --show 5
    .venv/bin/python bench/pii_locales_bench.py --json /tmp/now.json --baseline /tmp/pii_base_figures.json

See bench/README.md ("PII across locales").
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import json
import random
import re
import sys
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import phonenumbers
from faker import Faker
from harness import code_revision

import gateway.privacy.detect as detect_module
from gateway.privacy.detect import Detector

SEED = 20261207
PER_LOCALE = 120
CLEAN_PER_LOCALE = 40
TOP_NAMES = 300
SHOW = 0
VARIANTS = 30
MATCH_OVERLAP = 0.5  # a detected span matches a gold span when it covers at least half of it (as in pii_bench.py)
TODAY = date(2026, 12, 1)

TYPES = ("PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS", "US_SSN")
RECALL_TARGETS = {
    "CREDIT_CARD": 0.98,
    "PHONE_NUMBER": 0.98,
    "EMAIL_ADDRESS": 0.98,
    "IBAN_CODE": 0.98,
    "US_SSN": 0.98,
    "IP_ADDRESS": 0.98,
    "PERSON": 0.85,
}
PRECISION_TARGET = 0.85
CLEAN_TARGET = 0.15  # share of clean notes with any span: below this

# Faker locale -> ISO 3166 country (names-dataset's key and libphonenumber's region).
LOCALES: dict[str, str] = {
    "en_US": "US",
    "en_GB": "GB",
    "de_DE": "DE",
    "fr_FR": "FR",
    "es_ES": "ES",
    "it_IT": "IT",
    "nl_NL": "NL",
    "pl_PL": "PL",
    "hu_HU": "HU",
    "fi_FI": "FI",
    "ru_RU": "RU",
    "ja_JP": "JP",
    "pt_BR": "BR",
    "sv_SE": "SE",
}
# IBAN: Faker's iban() where its bank provider is the country's; a BBAN of digits for these others;
# a foreign (European) account for countries without IBANs.
BBAN_DIGITS = {"HU": 24, "SE": 20}
NO_IBAN = {"US", "JP", "RU"}
FOREIGN_IBAN_LOCALES = ("de_DE", "en_GB", "nl_NL", "fr_FR")
TRUNK_ZERO = {"GB", "DE", "FR", "NL", "FI", "SE", "JP"}  # "+49 (0)30 ..." is how people write these

EN_TITLES = {"F": ("Ms", "Ms.", "Mrs", "Dr."), "M": ("Mr", "Mr.", "Dr.")}
LOCAL_TITLES: dict[str, dict[str, tuple[str, ...]]] = {
    "DE": {"F": ("Frau", "Frau Dr."), "M": ("Herr", "Herr Dr.")},
    "FR": {"F": ("Mme",), "M": ("M.",)},
    "ES": {"F": ("Sra.",), "M": ("Sr.",)},
    "IT": {"F": ("Sig.ra", "Dott.ssa"), "M": ("Sig.", "Dott.")},
    "NL": {"F": ("mevrouw",), "M": ("meneer",)},
    "PL": {"F": ("Pani",), "M": ("Pan",)},
    "BR": {"F": ("Sra.",), "M": ("Sr.",)},
    "HU": {"F": ("Dr.",), "M": ("Dr.",)},
}
NAME_FORMS = (("full", 45), ("titled", 20), ("lower", 15), ("first", 10), ("last", 10))

PRODUCTS = (
    "Atlas Pro",
    "Atlas Lite",
    "Sync Connector",
    "Edge Gateway",
    "Vault Backup",
    "Insight Dashboards",
    "Harbor CRM",
    "Nimbus Storage",
    "Pulse Analytics",
    "Relay Mail",
)
CURRENCY = {
    "US": ("$", "pre", ",", "."),
    "GB": ("£", "pre", ",", "."),
    "JP": ("¥", "pre", ",", ""),
    "BR": ("R$ ", "pre", ".", ","),
    "PL": (" zł", "post", " ", ","),
    "HU": (" Ft", "post", " ", ""),
    "RU": (" ₽", "post", " ", ","),
    "SE": (" kr", "post", " ", ","),
    "IT": ("€ ", "pre", ".", ","),
    "NL": ("€ ", "pre", ".", ","),
}  # others: "1.299,00 €"

# {SLOT}s: PERSON forms NAME (full), NAME_ANY (a form drawn by NAME_FORMS), FIRST, LAST, TITLED,
# LOWER; EMAIL (of the note's last person, or Faker's), PHONE (Faker national), PHONE_INTL, PHONE_ANY,
# CARD, IBAN, IP, IP6, IP_ANY, SSN. Everything else is a hard negative (see Maker.negative).
PII_TEMPLATES: tuple[tuple[str, str], ...] = (
    (
        "crm call",
        "Call with {NAME} ({COMPANY}) on {DATE}: {FIRST} wants {QTY} seats of {PRODUCT} at {PRICE}, "
        "quote {PO} sent. Mobile {PHONE_ANY}.",
    ),
    (
        "ticket",
        "Ticket {TICKET}: {NAME_ANY} ({EMAIL}) cannot sign in since the upgrade to {VERSION}; requests come "
        "from {IP}. Callback on {PHONE}, SKU {SKU} affected.",
    ),
    (
        "invoice e-mail",
        "Dear {TITLED},\nplease find invoice {INVOICE} for {PRICE} attached; kindly transfer it to "
        "IBAN {IBAN} by {DATE}.\nKind regards,\n{NAME}\n{COMPANY}",
    ),
    (
        "minutes",
        "Minutes of {DATE}. Present: {NAME}, {NAME_ANY} and {TITLED} ({COMPANY}). Action items: {LAST} to "
        "confirm order {PO}; {FIRST} to check {PRODUCT} {VERSION}.",
    ),
    ("card on file", "Card on file for {NAME_ANY}: {CARD}, expires {EXP}. Order number {ORDERNUM} for {PRICE} ships on {DATE}."),
    ("onboarding", "Onboarding {NAME} on {DATE}: SSN {SSN}, laptop asset {SKU}, badge request {TICKET}."),
    (
        "security alert",
        "Security alert {TICKET}: failed logins for {EMAIL} from {IP_ANY} and {IP6}; the appliance runs firmware {IPVER}.",
    ),
    ("chat", "Hi {FIRST}, could you call {LOWER} back on {PHONE_INTL}? It's about ticket {TICKET} and SKU {SKU}."),
    (
        "voicemail",
        "Voicemail from {TITLED} ({PHONE_ANY}) about order {PO}: parcel {ORDERNUM} arrived damaged, "
        "replacement quoted at {PRICE}.",
    ),
    (
        "signature",
        "Thanks again for the {PRODUCT} demo on {DATE}, the {VERSION} roadmap looks good.\nsigned, "
        "{NAME_ANY}\n{PHONE_ANY} | {EMAIL}",
    ),
    ("refund", "Refund {PRICE} to card {CARD} for {NAME_ANY}; chargeback reference {PO}, invoice {INVOICE}."),
    ("bank details", "{NAME} asked us to pay {COMPANY} into {IBAN} from {DATE} onwards; the old account closes on {DATE}."),
    ("called", "{NAME_ANY} called {LOWER} about order {PO}; they will pay by card {CARD} before {DATE}. ticket {TICKET}"),
    ("tax form", "W-9 from {NAME_ANY} received, social security number {SSN}; questions go to {EMAIL} or {PHONE_ANY}."),
    (
        "escalation",
        "Escalated by {LAST} (account manager): {NAME_ANY} of {COMPANY} reports VPN drops between {IP} "
        "and {IP_ANY} on build {VERSION}.",
    ),
    (
        "intro e-mail",
        "Hi {FIRST},\nI'm {NAME} from {COMPANY}; we met at the {CITY} expo on {DATE}. You can reach me "
        "on {PHONE_ANY} or {EMAIL}.\nBest,\n{FIRST}",
    ),
)
CLEAN_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("renewal", "Renewal for {COMPANY} moves to {DATE}; list price {PRICE} for {QTY} seats of {PRODUCT}."),
    ("shipping", "Order {PO} shipped on {DATE}: SKU {SKU}, {QTY} units, invoice {INVOICE}, order number {ORDERNUM}."),
    ("release", "Upgrade to {VERSION} fixed the export bug reported in ticket {TICKET}; appliances stay on firmware {IPVER}."),
    ("stock", "SKU {SKU} is back in stock at the {CITY} warehouse: {QTY} units at {PRICE}, next delivery {DATE}."),
    ("deal", "{COMPANY} signed a three-year deal worth {PRICE} on {DATE}; the {PRODUCT} rollout starts {DATE}."),
    ("minutes", "Minutes of {DATE}: pricing for {COMPANY} approved, {PRODUCT} {VERSION} goes live, {PO} raised."),
    ("support", "Ticket {TICKET} closed: the webhook retry loop timed out after 30 s on build {VERSION} at {TIME}."),
    ("partner", "{COMPANY} and {COMPANY} will co-host a {PRODUCT} workshop in {CITY} on {DATE} at {TIME}."),
    ("finance", "Invoice {INVOICE} for {PRICE} is due on {DATE}; credit note {PO} offsets {PRICE}."),
    (
        "infra",
        "Port 8443 must stay open; the {PRODUCT} health check polls every 30 seconds on firmware {IPVER}, see ticket {TICKET}.",
    ),
)
PII_SLOTS = {
    "NAME",
    "NAME_ANY",
    "FIRST",
    "LAST",
    "TITLED",
    "LOWER",
    "EMAIL",
    "PHONE",
    "PHONE_INTL",
    "PHONE_ANY",
    "CARD",
    "IBAN",
    "IP",
    "IP6",
    "IP_ANY",
    "SSN",
}
SLOT = re.compile(r"\{([A-Z0-9_]+)\}")

# Card schemes: (scheme, prefixes, lengths, scheme-specific grouping or None). "2221-2720" draws a
# prefix in that range.
CARD_SCHEMES: tuple[tuple[str, tuple[str, ...], tuple[int, ...], tuple[int, ...] | None], ...] = (
    ("Visa", ("4",), (13, 16, 19), None),
    ("Mastercard 51-55", ("51", "52", "53", "54", "55"), (16,), None),
    ("Mastercard 2221-2720", ("2221-2720",), (16,), None),
    ("Amex", ("34", "37"), (15,), (4, 6, 5)),
    ("Discover", ("6011", "644", "645", "649", "65"), (16,), None),
    ("JCB", ("3528", "3540", "3589"), (16,), None),
    ("JCB 2131/1800", ("2131", "1800"), (15,), (4, 6, 5)),
    ("Maestro", ("5018", "5020", "5038", "5893", "6304", "6759", "6761", "6762", "6763"), tuple(range(12, 20)), None),
    ("UnionPay", ("62",), (16, 17, 18, 19), None),
    ("Diners", ("36", "38", "300", "305"), (14,), (4, 6, 4)),
    ("Mir", ("2200", "2201", "2202", "2203", "2204"), (16,), None),
)
CYRILLIC = dict(
    zip(
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        (
            "a",
            "b",
            "v",
            "g",
            "d",
            "e",
            "e",
            "zh",
            "z",
            "i",
            "y",
            "k",
            "l",
            "m",
            "n",
            "o",
            "p",
            "r",
            "s",
            "t",
            "u",
            "f",
            "kh",
            "ts",
            "ch",
            "sh",
            "shch",
            "",
            "y",
            "",
            "e",
            "yu",
            "ya",
        ),
    )
)

# ---------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class Gold:
    type: str
    start: int
    end: int
    variant: tuple[tuple[str, str], ...]  # (dimension, value), e.g. (("form", "titled"), ("script", "latin"))


@dataclass(frozen=True, slots=True)
class Negative:
    kind: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Piece:
    text: str
    type: str = ""  # a gold type, or "" for text that is not personal data
    variant: tuple[tuple[str, str], ...] = ()
    negative: str = ""  # the hard negative's kind


@dataclass(slots=True)
class Note:
    locale: str
    template: str
    clean: bool
    text: str = ""
    gold: list[Gold] = field(default_factory=list)
    negatives: list[Negative] = field(default_factory=list)
    detected: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Person:
    first: str
    last: str
    gender: str
    script: str


@dataclass(slots=True)
class NamePool:
    first: dict[str, dict[str, list[str]]]  # gender -> script -> names
    last: dict[str, list[str]]  # script -> names


def script_of(name: str) -> str:
    if re.search(r"[\u0400-\u04FF]", name):
        return "cyrillic"
    if re.search(r"[\u3040-\u30ff\u4e00-\u9fff]", name):
        return "cjk"
    return "latin"


def usable(name: str) -> bool:
    """names-dataset has some noise: keep names of letters (spaces, hyphens, apostrophes inside), and
    Latin ones of three letters or more (drops "Nl", "Al", "Yu")."""
    if not re.fullmatch(r"[^\W\d_]+(?:[ '\-][^\W\d_]+)*", name):
        return False
    return len(name) >= (3 if script_of(name) == "latin" else 2)


def by_script(names: Iterable[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for name in names:
        if usable(name):
            out[script_of(name)].append(name)
    return dict(out)


def load_names(countries: Sequence[str], top: int) -> tuple[dict[str, NamePool], float]:
    """The top first names (by gender) and last names of each country, from names-dataset loaded once
    (~15 s, ~2 GB; freed again before the analyzer loads)."""
    from names_dataset import NameDataset

    started = time.perf_counter()
    dataset = NameDataset()
    firsts = dataset.get_top_names(n=top)  # every country at once: each call walks the whole table
    lasts = dataset.get_top_names(n=top, use_first_names=False)
    del dataset
    gc.collect()
    pools = {}
    for country in countries:
        if country not in firsts or country not in lasts:
            raise SystemExit(f"names-dataset has no names for {country}")
        first = {g: by_script(firsts[country].get(g, [])) for g in ("F", "M")}
        pools[country] = NamePool(first, by_script(lasts[country]))
    return pools, time.perf_counter() - started


def surname_fits(last: str, gender: str, country: str) -> bool:
    """Russian and Polish surnames have a feminine form: Иванова, Kowalska for a woman."""
    if country not in ("RU", "PL"):
        return True
    feminine = last.endswith(("а", "я", "ska", "cka", "dzka"))
    return feminine == (gender == "F")


def luhn_complete(body: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:  # doubled once the check digit is appended
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return body + str((10 - total % 10) % 10)


def luhn_ok(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    return (sum(digits[-1::-2]) + sum(sum(divmod(2 * d, 10)) for d in digits[-2::-2])) % 10 == 0


def iban_ok(iban: str) -> bool:
    compact = iban.replace(" ", "")
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def iban_from_bban(country: str, bban: str) -> str:
    check = 98 - int("".join(str(int(c, 36)) for c in bban + country + "00")) % 97
    return f"{country}{check:02d}{bban}"


def grouped(digits: str, sizes: Iterable[int], sep: str) -> str:
    out, at = [], 0
    for size in sizes:
        if at < len(digits):
            out.append(digits[at : at + size])
            at += size
    if at < len(digits):
        out.append(digits[at:])
    return sep.join(out)


def ascii_local(text: str) -> str:
    text = "".join(CYRILLIC.get(c, c) for c in text.lower())
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return "".join(c for c in folded if c.isalnum())


def shape(text: str) -> str:
    """A phone number's written format: digits as 9, an extension collapsed ("(999)999-9999x…")."""
    return re.sub(r"x9+$", "x…", re.sub(r"\d", "9", text))


# ---------------------------------------------------------------- generation


class Maker:
    """Seeded generator of notes for one locale at a time; every card is Luhn-checked, every IBAN
    mod-97-checked, every phone number checked with libphonenumber."""

    def __init__(self, seed: int, names: dict[str, NamePool]) -> None:
        self.rng = random.Random(seed)
        self.names = names
        self.fakers: dict[str, Faker] = {}
        for i, locale in enumerate(sorted(set(LOCALES) | set(FOREIGN_IBAN_LOCALES))):
            self.fakers[locale] = Faker(locale)
            self.fakers[locale].seed_instance(seed + i)
        self.us = Faker("en_US")
        self.us.seed_instance(seed - 1)
        self.cities: dict[str, list[str]] = {}

    # --- people
    def person(self, country: str) -> Person:
        pool = self.names[country]
        gender = self.rng.choice(("F", "M"))
        script = self.rng.choices(list(pool.last), weights=[len(v) for v in pool.last.values()])[0]
        firsts = pool.first[gender].get(script) or pool.first[gender]["latin"]
        lasts = [n for n in pool.last[script] if surname_fits(n, gender, country)] or pool.last[script]
        return Person(self.rng.choice(firsts), self.rng.choice(lasts), gender, script)

    def full_name(self, p: Person) -> str:
        if p.script == "cjk":  # native order, no space
            return p.last + p.first if script_of(p.first) == "cjk" else f"{p.first} {p.last}"
        return f"{p.first} {p.last}"

    def title(self, p: Person, country: str) -> str:
        local = LOCAL_TITLES.get(country)
        if local and self.rng.random() < 0.4:
            return self.rng.choice(local[p.gender])
        return self.rng.choice(EN_TITLES[p.gender])

    def name(self, country: str, form: str, ctx: dict[str, Any]) -> list[Piece]:
        p = self.person(country)
        ctx["person"] = p
        variant = (("form", form), ("script", p.script))
        if form == "first":
            return [Piece(p.first, "PERSON", variant)]
        if form == "last":
            return [Piece(p.last, "PERSON", variant)]
        if form == "lower" and p.script != "cjk":
            return [Piece(self.full_name(p).lower(), "PERSON", variant)]
        if form == "titled":
            if country == "JP" and self.rng.random() < 0.5:  # "Suzuki-san", "佐藤さん"
                return [Piece(p.last, "PERSON", variant), Piece("さん" if p.script == "cjk" else "-san")]
            whole = self.full_name(p) if self.rng.random() < 0.3 else p.last
            return [Piece(self.title(p, country) + " "), Piece(whole, "PERSON", variant)]
        return [Piece(self.full_name(p), "PERSON", (("form", "full"), ("script", p.script)))]

    # --- other personal data
    def email(self, locale: str, ctx: dict[str, Any]) -> Piece:
        fake, p = self.fakers[locale], ctx.get("person")
        first, last = (ascii_local(p.first), ascii_local(p.last)) if p else ("", "")
        roll = self.rng.random()
        if first and last and roll < 0.5:
            local = self.rng.choice(
                (f"{first}.{last}", f"{first[0]}{last}", f"{first}_{last}", f"{first}{last}{self.rng.randint(1, 99)}", first)
            )
            domain = fake.free_email_domain() if self.rng.random() < 0.5 else fake.domain_name()
            return Piece(f"{local}@{domain}", "EMAIL_ADDRESS", (("source", "from the person's name"),))
        if roll < 0.75:
            return Piece(fake.free_email(), "EMAIL_ADDRESS", (("source", "Faker free_email"),))
        return Piece(fake.company_email(), "EMAIL_ADDRESS", (("source", "Faker company_email"),))

    def valid_phone(self, locale: str) -> tuple[str, phonenumbers.PhoneNumber]:
        region = LOCALES[locale]
        for _ in range(500):
            text = self.fakers[locale].phone_number()
            try:
                number = phonenumbers.parse(text, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(number) and phonenumbers.region_code_for_number(number) == region:
                return text, number
        raise SystemExit(f"Faker {locale} gave no number libphonenumber calls valid in 500 draws")

    def phone(self, locale: str, international: bool) -> Piece:
        text, number = self.valid_phone(locale)
        region = LOCALES[locale]
        if not international:
            return Piece(text, "PHONE_NUMBER", (("format", f"{region} Faker {shape(text)}"),))
        style, written = self.rng.choice(list(international_forms(number, region).items()))
        return Piece(written, "PHONE_NUMBER", (("format", f"{region} {style}"),))

    def card(self) -> Piece:
        scheme, prefixes, lengths, grouping = self.rng.choice(CARD_SCHEMES)
        length = self.rng.choice(lengths)
        prefix = self.rng.choice(prefixes)
        if prefix == "2221-2720":
            prefix = str(self.rng.randint(2221, 2720))
        number = luhn_complete(prefix + "".join(str(self.rng.randint(0, 9)) for _ in range(length - 1 - len(prefix))))
        assert luhn_ok(number) and len(number) == length
        styles = ["compact", "spaces by 4", "hyphens by 4"] + (["scheme grouping"] if grouping else [])
        style = self.rng.choice(styles)
        written = {
            "compact": number,
            "spaces by 4": grouped(number, [4] * 5, " "),
            "hyphens by 4": grouped(number, [4] * 5, "-"),
            "scheme grouping": grouped(number, grouping or (), " "),
        }[style]
        return Piece(written, "CREDIT_CARD", (("scheme", f"{scheme} {length}"), ("separators", style)))

    def iban(self, locale: str) -> Piece:
        country = LOCALES[locale]
        if country in BBAN_DIGITS:
            iban = iban_from_bban(country, "".join(str(self.rng.randint(0, 9)) for _ in range(BBAN_DIGITS[country])))
        else:
            fake = self.fakers[self.rng.choice(FOREIGN_IBAN_LOCALES) if country in NO_IBAN else locale]
            iban = fake.iban()
        if not iban_ok(iban):
            raise SystemExit(f"generator bug: {iban} fails mod 97")
        spaced = self.rng.random() < 0.5
        written = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4)) if spaced else iban
        return Piece(written, "IBAN_CODE", (("country", iban[:2]), ("format", "groups of 4" if spaced else "compact")))

    def ip(self, locale: str, kind: str) -> Piece:
        fake = self.fakers[locale]
        if kind == "any":
            kind = self.rng.choice(("v4 public", "v4 private", "v6"))
        if kind == "v6":
            full = fake.ipv6()
            if self.rng.random() < 0.5:
                return Piece(full, "IP_ADDRESS", (("form", "IPv6 full"),))
            net = ipaddress.IPv6Address(full).exploded.split(":")
            compressed = ipaddress.IPv6Address(":".join(net[:3] + ["0"] * 4 + net[7:])).compressed
            return Piece(compressed, "IP_ADDRESS", (("form", "IPv6 compressed"),))
        address = fake.ipv4_private() if kind == "v4 private" else fake.ipv4_public()
        return Piece(address, "IP_ADDRESS", (("form", f"IP{kind}"),))

    def ssn(self) -> Piece:
        text = self.us.ssn()
        style = self.rng.choices(("dashes", "spaces"), weights=(85, 15))[0]
        return Piece(text if style == "dashes" else text.replace("-", " "), "US_SSN", (("format", style),))

    # --- hard negatives
    def negative(self, kind: str, locale: str) -> Piece:
        r, c, fake = self.rng.randint, self.rng.choice, self.fakers[locale]
        values: dict[str, Callable[[], str]] = {
            "COMPANY": fake.company,
            "CITY": lambda: self.city(locale),
            "PRODUCT": lambda: c(PRODUCTS),
            "PRICE": lambda: price(r(19, 250_000) * 100 + c((0, 0, 99, 50)), LOCALES[locale]),
            "DATE": lambda: a_date(TODAY + timedelta(days=r(-300, 300)), c(range(6))),
            "VERSION": lambda: c(
                (
                    f"v{r(1, 9)}.{r(0, 30)}.{r(0, 20)}",
                    f"{r(1, 12)}.{r(0, 9)}",
                    f"{r(1, 9)}.{r(0, 20)}.{r(0, 9)}-rc{r(1, 4)}",
                    f"{r(2024, 2026)}.{r(1, 12)}.{r(0, 9)}",
                )
            ),
            "IPVER": lambda: f"{r(1, 12)}.{r(0, 20)}.{r(0, 9)}.{r(1, 250)}",  # a four-part version, valid IPv4 syntax
            "SKU": lambda: c(
                (
                    f"{r(1000, 9999)}-{r(1000, 9999)}-{r(10, 99)}",
                    f"{c('ABCDKMX')}{c('KLMPRT')}-{r(1000, 9999)}-{c('ABCX')}",
                    f"{r(100, 999)}-{r(1000, 9999)}",
                )
            ),
            "PO": lambda: c((f"PO-{r(2024, 2026)}-{r(1, 99999):05d}", f"PO {r(100000, 999999)}", f"SO-{r(10**7, 10**8 - 1)}")),
            "TICKET": lambda: c((f"#{r(10000, 99999)}", f"CRM-{r(100, 9999)}", f"SUP-{r(1000, 99999)}")),
            "INVOICE": lambda: c(
                (f"INV-{r(2024, 2026)}-{r(1, 99999):05d}", f"{r(2024, 2026)}/{r(1, 9999):04d}", f"RE{r(10**6, 10**7 - 1)}")
            ),
            "ORDERNUM": lambda: self.not_a_card(),
            "QTY": lambda: c((str(r(5, 900)), f"{r(1, 40)},{r(0, 9)}00")),
            "TIME": lambda: c((f"{r(8, 17)}:{c(('00', '15', '30', '45'))}", f"{r(8, 11)}:{c(('00', '30'))} am")),
            "EXP": lambda: f"{r(1, 12):02d}/{r(27, 31)}",
        }
        return Piece(values[kind](), negative=kind)

    def city(self, locale: str) -> str:
        """Faker's city of the locale. it_IT builds its city list from a set, whose order changes with
        the process's hash seed: there the choice is made from the sorted list, so a seed gives one data set."""
        if locale not in self.cities:
            lists = [p.cities for p in self.fakers[locale].get_providers() if isinstance(getattr(p, "cities", None), list)]
            self.cities[locale] = sorted(lists[0]) if lists else []
        return self.rng.choice(self.cities[locale]) if self.cities[locale] else self.fakers[locale].city()

    def not_a_card(self) -> str:
        """A 12-16 digit order number that fails Luhn (so it is no card), written like one."""
        while True:
            digits = str(self.rng.randint(1, 9)) + "".join(str(self.rng.randint(0, 9)) for _ in range(self.rng.choice((11, 15))))
            if not luhn_ok(digits):
                return grouped(digits, [4] * 4, " ") if self.rng.random() < 0.5 else digits

    # --- notes
    def slot(self, token: str, locale: str, ctx: dict[str, Any]) -> list[Piece]:
        country = LOCALES[locale]
        forms = {"NAME": "full", "FIRST": "first", "LAST": "last", "TITLED": "titled", "LOWER": "lower"}
        if token in forms or token == "NAME_ANY":
            form = forms.get(token) or self.rng.choices([f for f, _ in NAME_FORMS], weights=[w for _, w in NAME_FORMS])[0]
            return self.name(country, form, ctx)
        makers: dict[str, Callable[[], Piece]] = {
            "EMAIL": lambda: self.email(locale, ctx),
            "PHONE": lambda: self.phone(locale, False),
            "PHONE_INTL": lambda: self.phone(locale, True),
            "PHONE_ANY": lambda: self.phone(locale, self.rng.random() < 0.45),
            "CARD": self.card,
            "IBAN": lambda: self.iban(locale),
            "IP": lambda: self.ip(locale, self.rng.choice(("v4 public", "v4 private"))),
            "IP6": lambda: self.ip(locale, "v6"),
            "IP_ANY": lambda: self.ip(locale, "any"),
            "SSN": self.ssn,
        }
        if token in makers:
            return [makers[token]()]
        return [self.negative(token, locale)]

    def note(self, locale: str, template: tuple[str, str], clean: bool) -> Note:
        note = Note(locale, template[0], clean)
        ctx: dict[str, Any] = {}
        parts: list[str] = []
        at = 0
        for i, chunk in enumerate(SLOT.split(template[1])):
            pieces = [Piece(chunk)] if i % 2 == 0 else self.slot(chunk, locale, ctx)
            for piece in pieces:
                end = at + len(piece.text)
                if piece.type:
                    note.gold.append(Gold(piece.type, at, end, piece.variant + (("template", template[0]),)))
                elif piece.negative:
                    note.negatives.append(Negative(piece.negative, at, end))
                parts.append(piece.text)
                at = end
        note.text = "".join(parts)
        return note


def international_forms(number: phonenumbers.PhoneNumber, region: str) -> dict[str, str]:
    """One valid number written the ways people write numbers from abroad, some with odd grouping
    (without the extension Faker's en_US numbers may carry)."""
    fmt = phonenumbers.PhoneNumberFormat
    number = phonenumbers.PhoneNumber(
        country_code=number.country_code,
        national_number=number.national_number,
        italian_leading_zero=number.italian_leading_zero,
        number_of_leading_zeros=number.number_of_leading_zeros,
    )
    cc = number.country_code
    nsn = phonenumbers.national_significant_number(number)
    intl = phonenumbers.format_number(number, fmt.INTERNATIONAL)
    groups = intl.split(" ", 1)[1].replace("-", " ").split()
    forms = {
        "+CC standard": intl,
        "E.164": phonenumbers.format_number(number, fmt.E164),
        "+CC hyphens": f"+{cc}-" + "-".join(groups),
        "+CC dots": f"+{cc}." + ".".join(groups),
        "00CC": f"00{cc} " + " ".join(groups),
        "(+CC)": f"(+{cc}) {nsn}",
        "+CC in pairs": f"+{cc} " + " ".join(nsn[i : i + 2] for i in range(0, len(nsn), 2)),
        "+CC 3-3-rest": f"+{cc} {nsn[:3]} {nsn[3:6]} {nsn[6:]}",
    }
    if len(groups) > 1:
        forms["+CC (area)"] = f"+{cc} ({groups[0]}) {''.join(groups[1:])}"
    if region in TRUNK_ZERO:
        forms["+CC (0)"] = f"+{cc} (0){' '.join(groups)}"
    for style, written in forms.items():  # every form still reads as that number (00CC as dialled from Europe)
        if phonenumbers.parse(written, "DE" if style == "00CC" else region).national_number != number.national_number:
            raise SystemExit(f"generator bug: {style} {written!r} is not {intl}")
    return forms


def price(cents: int, country: str) -> str:
    symbol, where, thousands, decimal = CURRENCY.get(country, (" €", "post", ".", ","))
    whole = f"{cents // 100:,}".replace(",", thousands)
    amount = whole + (f"{decimal}{cents % 100:02d}" if decimal else "")
    return symbol + amount if where == "pre" else amount + symbol


def a_date(d: date, style: int) -> str:
    return (
        d.isoformat(),
        d.strftime("%d.%m.%Y"),
        d.strftime("%d/%m/%Y"),
        d.strftime("%B %d, %Y").replace(" 0", " "),
        d.strftime("%d %b %Y").lstrip("0"),
        d.strftime("%m/%d/%y"),
    )[style]


def generate(maker: Maker, locales: Sequence[str], per_locale: int, clean_per_locale: int) -> list[Note]:
    """Per locale, the templates in turn from a seeded offset (even coverage), clean notes after."""
    notes = []
    for locale in locales:
        offset = maker.rng.randrange(len(PII_TEMPLATES))
        notes += [maker.note(locale, PII_TEMPLATES[(offset + i) % len(PII_TEMPLATES)], False) for i in range(per_locale)]
        offset = maker.rng.randrange(len(CLEAN_TEMPLATES))
        notes += [maker.note(locale, CLEAN_TEMPLATES[(offset + i) % len(CLEAN_TEMPLATES)], True) for i in range(clean_per_locale)]
    return notes


# ---------------------------------------------------------------- analysis and scoring


def analyze(detector: Detector, notes: list[Note]) -> dict[str, float]:
    """Warm-up, then every note through `analyze_many` once (timed); the spans land on the notes."""
    texts = [n.text for n in notes]
    detector.analyze(texts[0])
    detector.analyze_many(texts[:8])
    started = time.perf_counter()
    found = detector.analyze_many(texts)
    seconds = time.perf_counter() - started
    for note, spans in zip(notes, found, strict=True):
        note.detected = tuple(spans)
    size = sum(len(t.encode()) for t in texts)
    return {"notes": len(texts), "bytes": size, "seconds": seconds, "kb_s": size / 1000 / seconds}


def covered(start: int, end: int, spans: Iterable[Any]) -> float:
    """Share of [start, end) inside the union of spans."""
    inside: set[int] = set()
    for s in spans:
        inside.update(range(max(start, s.start), min(end, s.end)))
    return len(inside) / (end - start)


def match(note: Note) -> tuple[dict[int, int], set[int]]:
    """One-to-one pairs gold index -> detected index, same type, detected covering >= MATCH_OVERLAP of
    the gold span (best overlap first); and the detected indexes left unmatched."""
    candidates = []
    for gi, g in enumerate(note.gold):
        for di, d in enumerate(note.detected):
            share = (min(g.end, d.end) - max(g.start, d.start)) / (g.end - g.start)
            if d.type == g.type and share >= MATCH_OVERLAP:
                candidates.append((-share, gi, di))
    pairs: dict[int, int] = {}
    used: set[int] = set()
    for _, gi, di in sorted(candidates):
        if gi not in pairs and di not in used:
            pairs[gi] = di
            used.add(di)
    return pairs, set(range(len(note.detected))) - used


def blame(note: Note, span: Any) -> str:
    """What a false positive hit: a gold value (of another type, or a part of one), a hard negative, or the template."""
    for g in note.gold:
        if g.start < span.end and span.start < g.end:
            return f"gold {g.type}" if g.type != span.type else "part of a gold value"
    for n in note.negatives:
        if n.start < span.end and span.start < n.end:
            return n.kind
    return "template text"


@dataclass(slots=True)
class Scores:
    counts: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))  # type -> support/tp/fp/fn/leaked
    locale: dict[tuple[str, str], Counter[str]] = field(default_factory=lambda: defaultdict(Counter))  # (locale, type)
    variants: dict[tuple[str, str, str], Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    fp_hits: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    clean: Counter[str] = field(default_factory=Counter)  # locale -> clean notes, locale+"*" -> flagged
    clean_types: Counter[str] = field(default_factory=Counter)
    misses: dict[str, list[tuple[Note, Gold]]] = field(default_factory=lambda: defaultdict(list))
    false_positives: dict[str, list[tuple[Note, Any, str]]] = field(default_factory=lambda: defaultdict(list))


def score(notes: list[Note]) -> Scores:
    s = Scores()
    for note in notes:
        pairs, unmatched = match(note)
        for gi, g in enumerate(note.gold):
            hit = gi in pairs
            leaked = covered(g.start, g.end, note.detected) < MATCH_OVERLAP
            for counter in (s.counts[g.type], s.locale[(note.locale, g.type)]):
                counter.update(support=1, tp=int(hit), fn=int(not hit), leaked=int(leaked))
            for dim, value in g.variant:
                s.variants[(g.type, dim, value)].update(support=1, tp=int(hit))
            if not hit:
                s.misses[g.type].append((note, g))
        for di in sorted(unmatched):
            d = note.detected[di]
            if d.type not in TYPES:
                continue  # e.g. a literal placeholder span: not personal data, not a claim of it
            what = blame(note, d)
            s.counts[d.type].update(fp=1)
            s.locale[(note.locale, d.type)].update(fp=1)
            s.fp_hits[d.type][what] += 1
            s.false_positives[d.type].append((note, d, what))
        if note.clean:
            s.clean[note.locale] += 1
            flagged = [d for d in note.detected if d.type in TYPES]
            s.clean[note.locale + "*"] += int(bool(flagged))
            s.clean_types.update({d.type for d in flagged})
    return s


def ratio(num: float, den: float) -> float:
    return num / den if den else float("nan")


def tallied(c: Counter[str]) -> dict[str, Any]:
    """One type's counts (or all types' together) with the rates they give."""
    return {
        "support": c["support"],
        "tp": c["tp"],
        "fp": c["fp"],
        "fn": c["fn"],
        "leaked": c["leaked"],
        "precision": ratio(c["tp"], c["tp"] + c["fp"]),
        "recall": ratio(c["tp"], c["support"]),
        "leaked_rate": ratio(c["leaked"], c["support"]),
    }


def figures(s: Scores, locales: Sequence[str], speed: dict[str, float]) -> dict[str, Any]:
    """Every figure of the report, JSON-ready."""
    types = {kind: tallied(s.counts[kind]) for kind in TYPES}
    total = Counter[str]()
    for kind in TYPES:
        total.update(s.counts[kind])
    overall = tallied(total)
    per_locale = {}
    for locale in locales:
        person, phone = s.locale[(locale, "PERSON")], s.locale[(locale, "PHONE_NUMBER")]
        every = Counter[str]()
        for kind in TYPES:
            every.update(s.locale[(locale, kind)])
        per_locale[locale] = {
            "country": LOCALES[locale],
            "person_support": person["support"],
            "person_recall": ratio(person["tp"], person["support"]),
            "phone_recall": ratio(phone["tp"], phone["support"]),
            "recall": ratio(every["tp"], every["support"]),
            "precision": ratio(every["tp"], every["tp"] + every["fp"]),
            "leaked": every["leaked"],
            "clean_notes": s.clean[locale],
            "clean_flagged": s.clean[locale + "*"],
        }
    clean_notes, flagged = sum(s.clean[lo] for lo in locales), sum(s.clean[lo + "*"] for lo in locales)
    variants = {
        f"{kind} | {dim} | {value}": {"support": c["support"], "recall": ratio(c["tp"], c["support"])}
        for (kind, dim, value), c in sorted(s.variants.items())
    }
    return {
        "types": types,
        "overall": overall,
        "locales": per_locale,
        "variants": variants,
        "false_positive_hits": {k: dict(v.most_common()) for k, v in s.fp_hits.items()},
        "clean": {
            "notes": clean_notes,
            "flagged": flagged,
            "share": ratio(flagged, clean_notes),
            "types": dict(s.clean_types.most_common()),
        },
        "speed": {k: round(v, 3) for k, v in speed.items()},
    }


def verdicts(fig: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for kind, target in RECALL_TARGETS.items():
        value = fig["types"][kind]["recall"]
        out[f"{kind} recall >= {target:g}"] = {"value": value, "met": value >= target}
    value = fig["overall"]["precision"]
    out[f"overall precision >= {PRECISION_TARGET:g}"] = {"value": value, "met": value >= PRECISION_TARGET}
    value = fig["clean"]["share"]
    out[f"clean notes with any span < {CLEAN_TARGET:.0%}"] = {"value": value, "met": value < CLEAN_TARGET}
    return out


# ---------------------------------------------------------------- report


def excerpt(text: str, start: int, end: int, width: int = 50) -> str:
    left, right = max(0, start - width), min(len(text), end + width)
    body = f"{'…' if left else ''}{text[left:start]}[[{text[start:end]}]]{text[end:right]}{'…' if right < len(text) else ''}"
    return body.replace("\n", " / ")


def print_types(fig: dict[str, Any], targets: dict[str, dict[str, Any]]) -> None:
    print(f"{'type':<14} {'support':>7} {'TP':>6} {'FP':>5} {'FN':>5} {'precision':>9} {'recall':>6} {'leaked':>6}  target")
    for kind in TYPES:
        t = fig["types"][kind]
        key = f"{kind} recall >= {RECALL_TARGETS[kind]:g}"
        verdict = f"recall >= {RECALL_TARGETS[kind]:g} {'MET' if targets[key]['met'] else 'MISSED'}"
        print(
            f"{kind:<14} {t['support']:>7} {t['tp']:>6} {t['fp']:>5} {t['fn']:>5} {t['precision']:>9.3f} {t['recall']:>6.3f} "
            f"{t['leaked']:>6}  {verdict}"
        )
    o = fig["overall"]
    key = f"overall precision >= {PRECISION_TARGET:g}"
    print(
        f"{'all types':<14} {o['support']:>7} {o['tp']:>6} {o['fp']:>5} {o['fn']:>5} {o['precision']:>9.3f} {o['recall']:>6.3f} "
        f"{o['leaked']:>6}  precision >= {PRECISION_TARGET:g} {'MET' if targets[key]['met'] else 'MISSED'}"
    )
    c = fig["clean"]
    key = f"clean notes with any span < {CLEAN_TARGET:.0%}"
    kinds = ", ".join(f"{k} {n}" for k, n in c["types"].items()) or "none"
    print(
        f"clean notes with any span: {c['flagged']}/{c['notes']} = {c['share']:.1%} (target < {CLEAN_TARGET:.0%}: "
        f"{'MET' if targets[key]['met'] else 'MISSED'}); notes flagged per type: {kinds}"
    )


def print_locales(fig: dict[str, Any]) -> None:
    print(
        f"\n{'locale':<7} {'cc':<3} {'PERSON':>6} {'recall':>6} {'PHONE':>6} {'all':>6} {'prec.':>6} {'leaked':>6} {'clean flagged':>13}"
    )
    for locale, row in fig["locales"].items():
        print(
            f"{locale:<7} {row['country']:<3} {row['person_support']:>6} {row['person_recall']:>6.3f} {row['phone_recall']:>6.3f} "
            f"{row['recall']:>6.3f} {row['precision']:>6.3f} {row['leaked']:>6} {row['clean_flagged']:>6}/{row['clean_notes']:<6}"
        )
    print("(PERSON: support and recall; PHONE, all: recall; prec.: precision over all types; leaked: values under half masked)")


def print_variants(fig: dict[str, Any], limit: int) -> None:
    weak = sorted((v["recall"], key, v["support"]) for key, v in fig["variants"].items() if v["recall"] < 1)
    print(f"\nweakest variants (recall < 1, worst first; support in brackets; {len(weak)} in all):")
    for rec, key, sup in weak[:limit]:
        print(f"  {key:<70} {rec:5.3f} ({sup})")
    if len(weak) > limit:
        print(f"  ... {len(weak) - limit} more (raise --variants, or see --json)")
    hits = fig["false_positive_hits"]
    if hits:
        print(
            "false positives by what they hit: "
            + "; ".join(
                f"{kind}: " + ", ".join(f"{hit} {n}" for hit, n in counts.items()) for kind, counts in sorted(hits.items())
            )
        )


def print_examples(s: Scores, show: int) -> None:
    for kind in TYPES:
        misses, fps = s.misses.get(kind, []), s.false_positives.get(kind, [])
        if not misses and not fps:
            continue
        print(f"-- {kind}: {len(misses)} missed, {len(fps)} false positive(s)")
        for note, g in misses[:show]:
            near = [d for d in note.detected if d.start < g.end and g.start < d.end]
            seen = "; ".join(f"{d.type} {note.text[d.start : d.end]!r}" for d in near) or "nothing detected there"
            tags = ", ".join(v for _, v in g.variant)
            print(f"   miss {note.locale} [{tags}] {excerpt(note.text, g.start, g.end)}  -> {seen}")
        for note, d, hit in fps[:show]:
            print(f"   false positive {note.locale} (on {hit}, score {d.score:.2f}) {excerpt(note.text, d.start, d.end)}")


def package(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def report(
    args: argparse.Namespace, notes: list[Note], s: Scores, fig: dict[str, Any], loads: dict[str, float]
) -> dict[str, Any]:
    targets = verdicts(fig)
    speed = fig["speed"]
    print(
        f"\n=== PII across locales: {len(notes):,} notes ({speed['bytes'] / 1000:,.1f} KB) in {len(args.locales)} locales, "
        f"{fig['overall']['support']:,} planted values, {fig['clean']['notes']} clean notes; seed {args.seed}, code {args.code}, "
        f"presidio-analyzer {package('presidio-analyzer')}, spaCy {package('spacy')}, Faker {package('faker')}, "
        f"names-dataset {package('names-dataset')} ==="
    )
    print(f"detector: {detect_module.__file__}")
    print(
        f"match: same type, the detected span covers >= {MATCH_OVERLAP:.0%} of the gold span, one to one; "
        f"leaked: under {MATCH_OVERLAP:.0%} of the gold value inside detected spans of any type (visible after masking)"
    )
    print_types(fig, targets)
    print_locales(fig)
    print_variants(fig, args.variants)
    if args.show:
        print()
        print_examples(s, args.show)
    print(
        f"\nanalysis (warm, analyze_many over all {speed['notes']:,} notes in its batches): {speed['kb_s']:.2f} KB/s, "
        f"{speed['bytes'] / 1000:,.1f} KB in {speed['seconds']:.1f} s ({1000 * speed['seconds'] / speed['notes']:.1f} ms per note); "
        f"names-dataset load {loads['names_s']:.1f} s, analyzer load {loads['analyzer_s']:.1f} s"
    )
    met = sum(v["met"] for v in targets.values())
    print(
        f"targets: {met}/{len(targets)} MET; "
        + ", ".join(f"{k}: {v['value']:.3f} {'MET' if v['met'] else 'MISSED'}" for k, v in targets.items())
    )
    return {
        "bench": "pii_locales",
        "seed": args.seed,
        "per_locale": args.per_locale,
        "clean_per_locale": args.clean_per_locale,
        "locale_codes": list(args.locales),
        "top_names": args.top_names,
        "code": args.code,
        "detector": detect_module.__file__,
        "versions": {p: package(p) for p in ("presidio-analyzer", "spacy", "faker", "names-dataset")},
        "match": f"same type, >= {MATCH_OVERLAP:g} of gold covered, one to one",
        "loads_s": loads,
        "targets": targets,
        "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **fig,
    }


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return None if value != value else round(value, 4)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def dig(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key, {}) if isinstance(data, dict) else {}
    return data if isinstance(data, (int, float)) else None


def compare(path: Path, now: dict[str, Any]) -> None:
    """The headline figures of this run against those of an earlier `--json` file."""
    before = json.loads(path.read_text())
    same = all(before.get(k) == now.get(k) for k in ("seed", "per_locale", "clean_per_locale", "locale_codes", "top_names"))
    print(
        f"\nagainst {path} (code {before.get('code')}, {before.get('measured_at')})"
        + ("" if same else "; WARNING: other data (seed, sizes or locales differ)")
    )
    rows: list[tuple[str, tuple[str, ...]]] = [
        (f"{kind} {m}", ("types", kind, m)) for kind in TYPES for m in ("precision", "recall")
    ]
    rows += [
        ("all types precision", ("overall", "precision")),
        ("all types recall", ("overall", "recall")),
        ("leaked values", ("overall", "leaked")),
        ("clean notes with any span", ("clean", "share")),
        ("KB/s", ("speed", "kb_s")),
    ]
    print(f"  {'figure':<26} {'before':>8} {'now':>8} {'change':>8}")
    for label, key in rows:
        old, new = dig(before, key), dig(now, key)
        change = "" if old is None or new is None else number(new - old, signed=True)
        print(f"  {label:<26} {number(old):>8} {number(new):>8} {change:>8}")


def number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:+d}" if signed else str(value)
    if signed and abs(value) < 0.0005:
        return "0"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seed", type=int, default=SEED, help=f"data seed (default {SEED})")
    parser.add_argument(
        "--per-locale", type=int, default=PER_LOCALE, help=f"notes with personal data per locale (default {PER_LOCALE})"
    )
    parser.add_argument(
        "--clean-per-locale",
        type=int,
        default=CLEAN_PER_LOCALE,
        help=f"notes without personal data per locale (default {CLEAN_PER_LOCALE})",
    )
    parser.add_argument("--locales", default=",".join(LOCALES), help="comma-separated Faker locales (default: all 14)")
    parser.add_argument(
        "--top-names", type=int, default=TOP_NAMES, help=f"first and last names per country (default {TOP_NAMES})"
    )
    parser.add_argument("--show", type=int, default=SHOW, help="missed and false-positive examples printed per type (default 0)")
    parser.add_argument("--variants", type=int, default=VARIANTS, help=f"weakest variants listed (default {VARIANTS})")
    parser.add_argument("--json", type=Path, help="write every figure as JSON to this file")
    parser.add_argument("--baseline", type=Path, help="an earlier run's --json file: print the headline figures against it")
    parser.add_argument(
        "--code", default="", help="label of the code measured (default: the git revision of the imported gateway)"
    )
    args = parser.parse_args(argv)
    args.locales = [lo.strip() for lo in args.locales.split(",") if lo.strip()]
    unknown = [lo for lo in args.locales if lo not in LOCALES]
    if unknown or not args.locales:
        parser.error(f"unknown locale(s) {unknown}; known: {', '.join(LOCALES)}")
    if args.per_locale < 1 or args.clean_per_locale < 0 or args.show < 0 or args.top_names < 10:
        parser.error("--per-locale must be positive, --clean-per-locale and --show not negative, --top-names at least 10")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.code = args.code or code_revision()
    print(f"gateway.privacy.detect from {detect_module.__file__}; loading names-dataset...", flush=True)
    names, names_s = load_names([LOCALES[lo] for lo in args.locales], args.top_names)
    notes = generate(Maker(args.seed, names), args.locales, args.per_locale, args.clean_per_locale)
    print(f"Generated {len(notes):,} notes; loading the analyzer...", flush=True)
    started = time.perf_counter()
    detector = Detector()
    analyzer_s = time.perf_counter() - started
    print(f"Analysing {len(notes):,} notes...", flush=True)
    speed = analyze(detector, notes)
    scores = score(notes)
    out = report(
        args,
        notes,
        scores,
        figures(scores, args.locales, speed),
        {"names_s": round(names_s, 1), "analyzer_s": round(analyzer_s, 1)},
    )
    if args.baseline:
        compare(args.baseline, rounded(out))
    if args.json:
        args.json.write_text(json.dumps(rounded(out), indent=1, ensure_ascii=False) + "\n")
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
