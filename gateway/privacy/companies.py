"""Whether a PERSON span names a company or a product, not a person (`company_or_product`): a
company word or suffix in or beside it ("GmbH", "Logistics", "& Co", "S.A.", "et Fils"); a firm's
list of surnames ("Rodriguez, Sosa and Henry"); a hyphenated pair of surnames alone
("Glover-Miller"); a well-known brand (`BRANDS`); unless a pair of names, a title or a greeting
supports it: digits, acronyms, CamelCase or product words beside it ("Dell XPS 13", "Atlas Pro").
"""

from __future__ import annotations

import re

from gateway.privacy.gazetteer import FIRST, LAST, WORDNAME, Gazetteer
from gateway.privacy.name_context import Word, adjacent, cue_before, greeting_before, title_before, verb_after
from gateway.privacy.name_words import (
    BRANDS,
    COMPANY_WORDS,
    DIGIT,
    HONORIFIC_SUFFIXES,
    ORG_BEFORE,
    PRODUCT_WORDS,
    ROLE_WORDS,
    camel,
    fold,
    folded,
)

_DETERMINERS = folded("the a an this that our their your its his her")


def company_or_product(text: str, words: list[Word], i: int, j: int, g: Gazetteer, strict: bool = True) -> bool:
    """Whether the PERSON span of words[i..j] names a company or a product, not a person.

    Always, unless a title stands before it: a company word in it or right after it ("Jordan
    Logistics GmbH", "Kaya Tekstil", "Whitfield & Co", "S.A."), an organisation or place word right
    before it ("Banco Santander", "San Diego"), an ampersand joining it to another name ("Johnson &
    Johnson"), or a well-known brand ("Morgan Stanley", "Toyota").

    Also, unless a gazetteer pair of names or a greeting, sign-off or label supports it: a product
    word in it or a product-like word right after it (digits, an acronym, CamelCase, "Pro", "Max",
    a capitalised common English word: "Dell XPS 13", "Ford Transit", "Tanaka Precision"), digits or
    CamelCase in it, an acronym alone, a determiner before it ("the Porto office"), or no name of
    the gazetteer in it at all but a common English word.
    """
    if title_before(text, words, i) or any(w.key.endswith(HONORIFIC_SUFFIXES) for w in words[i : j + 1]):
        return False
    span = words[i : j + 1]
    start, end = span[0].start, span[-1].end
    after_raw = _next_chunk(text, end)
    after = _bare(after_raw)
    before_raw = _previous_chunk(text, start)
    before = _bare(before_raw)
    if any(CJK_COMPANY.search(w.text) for w in span) or len(span) > 1 and span[0].key in ORG_BEFORE:
        return True
    if len(span) == 1 and _company_word(text[start:end], g):  # "Kft"
        return True
    first_name = span[0].kind & FIRST and len(span) > 1  # "Maria Mills", "Marine Dupont"
    rest = _TO_SPACE.match(text, end)
    whole = text[start : rest.end() if rest else end]  # "Evrard S.A.R" of "Evrard S.A.R.L."
    if any(_company_word(chunk, g, bool(first_name)) for chunk in whole.split()[1:]) or _company_word(after_raw, g):
        return True
    if _surname_list(text, start, end, strict) or strict and _surname_pair(span, text, words, i, g):
        return True
    if after_raw.startswith(("&", "+")) or before_raw.endswith(("&", "+")):
        return True
    tail = _LIST_TAIL.match(text, end)  # "Rémy Charles et Fils", "Sabatini, Modugno e Flaiano SPA"
    if tail and any(_company_word(word.rstrip(",;:)!?\"'’”»"), g) for word in tail.groups() if word):
        return True
    if before in ORG_BEFORE and before_raw[:1].isupper():
        return True
    if _brand([w.key for w in span], after, before, g):
        return True
    if not strict:
        return False
    plain = [w for w in span if w.plain]
    if len(span) == 1 and span[0].style == "lower" and not plain and not greeting_before(text, words, i):
        return True  # "ask terraform plan": a lower-case word the gazetteer lacks needs a greeting or sign-off
    if len(plain) >= 2 or plain and any(w.kind == WORDNAME for w in span) or cue_before(text, words, i) == "strong":
        return False
    if any(w.key in PRODUCT_WORDS for w in span[1:]) or _productish(after_raw, after, g):
        return True
    if len(span) == 1 and span[0].key in PRODUCT_WORDS and not span[0].kind:
        return True
    if end < len(text) and text[end].isalnum() or start > 0 and text[start - 1].isalnum():
        return True  # a name does not end or start inside a token ("Galaxy S" of "Galaxy S24")
    if before_raw[:1].isupper() and (before in PRODUCT_WORDS or DIGIT.search(before_raw) or camel(before_raw)):
        return True  # "iPhone 15 Pro Max"
    if DIGIT.search(text, start, end) or any(camel(w.text) for w in span):
        return True
    if len(span) == 1 and span[0].style == "upper" and not span[0].plain:
        return True
    if len(span) == 1 and span[0].kind == WORDNAME and not verb_after(text, words, j):
        return True  # "Bill the customer", "Hope you are well"
    if i > 0 and words[i - 1].key in _DETERMINERS and adjacent(text, words[i - 1], words[i]):
        return True
    return not any(w.kind for w in span) and any(w.key in g.common for w in span)


def _company_word(chunk: str, g: Gazetteer, after_first_name: bool = False) -> bool:
    """A company suffix or business word, capitalised or with its dots ("GmbH", "Logistics", "S.A.",
    "s.r.o.", "Oy"); not "as" or "co" in running text, nor a surname after a first name ("Maria
    Mills")."""
    bare = _bare(chunk)
    if bare not in COMPANY_WORDS or not (chunk[:1].isupper() or "." in chunk or not chunk[:1].isalpha()):
        return False
    return not (after_first_name and "." not in chunk and g.kind(bare))


def _bare(chunk: str) -> str:
    """A chunk folded, without its dots and slashes: "S.A." and "S/A" are "sa", "A.Ş." is "as"."""
    return fold(chunk.strip(",;:!?()[]\"'’”»«")).replace(".", "").replace("/", "") if chunk else ""


def _next_chunk(text: str, end: int) -> str:
    """The run of non-space characters right after `end`, when only a space or two (or a hyphen)
    stand between: "GmbH", "S.A.", "&", "XPS", "13"."""
    k = end
    while k < len(text) and text[k] in " \t" and k - end < 2:
        k += 1
    if k == end and not text.startswith("-", k):
        return ""
    if text.startswith("-", k):
        k += 1
        while k < len(text) and text[k] in " \t" and k - end < 4:
            k += 1
    m = _CHUNK.match(text, k)
    return m.group().rstrip(".,;:!?)'’\"") if m else ""


def _previous_chunk(text: str, start: int) -> str:
    k = start
    while k > 0 and text[k - 1] in " \t" and start - k < 2:
        k -= 1
    if k == start and not (k > 0 and text[k - 1] in "-«“\"'„"):
        return ""
    if k > 0 and text[k - 1] == "-":
        k -= 1
    if k == start and k > 0 and text[k - 1] in "«“\"'„":  # ООО «Фомин Пахомова»
        k -= 1
        while k > 0 and text[k - 1] in " \t" and start - k < 3:
            k -= 1
    b = k
    while b > 0 and not text[b - 1].isspace() and text[b - 1] not in '([{"“«|,;:':
        b -= 1
    return text[b:k]


_CHUNK = re.compile(r"[^\s|\\()\[\]{}<>\"“”«»;,!?]+")


def _productish(raw: str, key: str, g: Gazetteer) -> bool:
    """A word after a name that makes it a product or a company: digits, an acronym, CamelCase, a
    product or company word, a capitalised common English word that is no name or role."""
    if not raw or not (raw[0].isupper() or raw[0].isdigit()):
        return False
    if key in ROLE_WORDS or g.kind(key) & (FIRST | LAST):
        return False
    if DIGIT.search(raw) or camel(raw) or len(raw) > 1 and raw.isupper() and raw.isalpha():
        return True
    return key in PRODUCT_WORDS or key in COMPANY_WORDS or key in g.common and key not in _FUNCTION_WORDS


_TO_SPACE = re.compile(r"[^\s|,;:()]*")
# Three or more single capitalised words in a list: "Rodriguez, Rodriguez and Anderson", "Giorgetti,
# Nadi e Ajello" (a firm's name; a list of people names them in full, or with titles).
_WORD_LIST = re.compile(
    r"(?<![\w'’.-])[^\W\d_][\w'’-]*(?:, [^\W\d_][\w'’-]*){1,3},? (?:and|&|y|e|et|und|i|och|og|en|и) "
    r"[^\W\d_][\w'’-]*(?![\w'’-])"
)
_COLON_BEFORE = re.compile(r":[ \t]*(?:[^\W\d_][\w'’-]*,[ \t]*)*$")  # ": " before the list, maybe with items before it
_LAST_WORD = re.compile(r"([^\W\d_][\w'’-]*) $")
_LIST_SPLIT = re.compile(r",? (?:and|&|y|e|et|und|i|och|og|en|и) |, ")


def _surname_list(text: str, start: int, end: int, strict: bool = True) -> bool:
    """Whether the span is an item of a firm's list of surnames. Not strict (a name the classifier
    read): not after a colon, where a list names people ("They had 6: Kateřina, James ... and
    Michael")."""
    for m in _WORD_LIST.finditer(text, max(0, start - 80), min(len(text), end + 80)):
        if not (m.start() <= start and end <= m.end()):
            continue
        if not strict and _COLON_BEFORE.search(text, max(0, m.start() - 60), m.start()):
            continue
        items = _LIST_SPLIT.split(m.group())
        previous = _LAST_WORD.search(text, max(0, m.start() - 40), m.start())
        after = text[m.end() : m.end() + 2]
        if (
            all(item[:1].isupper() for item in items)
            and not (previous and previous.group(1)[:1].isupper())
            and not (after[:1] == " " and after[1:].isupper())
        ):
            return True  # not the end of a full name before it ("Anna Nowak, ..."), nor a first name ("... and Lis Kowalska")
    return False


def _surname_pair(span: list[Word], text: str, words: list[Word], i: int, g: Gazetteer) -> bool:
    """A hyphenated pair of surnames standing alone ("Glover-Miller", "Cox-Vargas"): a firm's name
    (a person's double surname comes with a first name or a title)."""
    if len(span) != 1 or "-" not in span[0].text or span[0].style != "capital":
        return False
    parts = span[0].key.split("-")
    if len(parts) != 2 or not all(g.kind(p) & LAST or g.kind(p) == WORDNAME for p in parts):
        return False
    previous = words[i - 1] if i > 0 else None
    return (
        not (previous and previous.kind & FIRST and adjacent(text, previous, span[0])) and cue_before(text, words, i) != "strong"
    )


_LIST_TAIL = re.compile(
    r"(?:\s*,\s*[^\W\d_][\w'’-]*){0,3}\s*,?\s+(?:and|y|e|et|és|und|i|og|och|en|&|и)\s+"
    r"(\S+)(?:\s+(\S+))?"
)
CJK_COMPANY = re.compile("会社|株式|有限|合同|公司|集团|集團|银行|銀行|商事|産業|工業|水産|印刷|商店|建設|電気|電機|病院|大学")
_FUNCTION_WORDS = folded("and or but the a an of in on at for to from with by is was will")


def _brand(keys: list[str], after: str, before: str, g: Gazetteer) -> bool:
    """A well-known brand: the span's words joined ("morgan-stanley"), with the word after or before
    it ("Lockheed" + "Martin"), or a brand word with no other plain name beside it."""
    keys = [k.replace("'", "").replace("’", "") for k in keys]
    joined = "-".join(keys)
    if joined in BRANDS or all(k in BRANDS for k in keys):
        return True
    if after and f"{joined}-{after}" in BRANDS or before and f"{before}-{joined}" in BRANDS:
        return True
    return any(k in BRANDS for k in keys) and not any(k not in BRANDS and g.kind(k) & (FIRST | LAST) for k in keys)
