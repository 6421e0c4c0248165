"""The words around a number that support or negate it (`context`), for the card, phone and IP
address recognizers.

Read here, not by Presidio's `LemmaContextAwareEnhancer`, which matches substrings of the five
lemmas before a value ("ring" in "during", "tel" in "hotel", "cell" in "cancellation"): whole
words, up to six before the value in the same paragraph (so never from another text of a joined
batch) and three after it on the same line. The nearest word decides; a negating word counts only
on the same line, at most three words away. Phone words (`PHONE_CONTEXT`) are also found inside a
CJK run ("電話") and, for a few (`PHONE_CONTEXT_ADJACENT`), only right before the number.
"""

from __future__ import annotations

import re

LATIN = r"0-9A-Za-z_\u00c0-\u024f"  # a number glued to these is part of an identifier

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
# A whole word (not the `INV` of `INV808339`), `s/n`, `tel.`, or a sign.
_WORD = re.compile(r"(?<![^\W_])[^\W\d_]+(?:[/.#][^\W\d_]+)*[.#]?(?![^\W_])|[#№$€£¥%☎📞]|" + "|".join(PHONE_CONTEXT_CJK))
_WORDS_BEFORE, _CHARS_BEFORE, _WORDS_AFTER, _CHARS_AFTER, _NEGATIVE_REACH = 6, 60, 3, 30, 3


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


def _cjk(word: str, positive: frozenset[str]) -> bool:
    return positive is PHONE_CONTEXT and any(marker in word for marker in PHONE_CONTEXT_CJK)
