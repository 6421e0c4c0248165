"""The words the name rules read, folded as the gazetteer's keys: titles, greetings and cues,
labels, verbs, company, organisation, product and role words, brands; and the shapes of a word
(a name's letters, CJK, CamelCase).

`fold` makes the key of a word: casefolded, without accents ("José", "JOSE" and "jose" are one
key). The lists are folded and written without dots ("S.A." is "sa"). Titles and cue words decide
where a lone name counts (`names.py`), company, product and brand words where a name is no person
(`companies.py`); `COMMON_NOUNS` and `BUSINESS_AND_CALENDAR` join the gazetteer's stoplist
(`gazetteer.py`).
"""

from __future__ import annotations

import re
import unicodedata

ENTITY = "PERSON"  # the type of the spans the name rules find and refine

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


def folded(words: str) -> frozenset[str]:
    return frozenset(fold(w) for w in words.split())


# ---------------------------------------------------------------- word lists (folded, no dots)

# Titles and honorifics before a name; "m" (French "M.") only with its dot.
TITLES = folded("""
mr mrs ms miss mx mister dr doctor prof professor sir dame madam madame mme mlle herr frau hr fr sr sra srta
sig sigra signor signora dott dottssa ing pan pani panna dhr mevr mw meneer mevrouw heer juffrouw fru herra rouva
sayin bay bayan shri sri smt
gospodin gospozha господин госпожа г-н г-жа
""")
LOWER_TITLES = folded("meneer mevrouw heer juffrouw")  # Dutch titles, written in lower case
HONORIFIC_SUFFIXES = ("-san", "-sama", "-kun", "-chan", "-sensei", "-shi", "-ssi", "-nim")
PARTICLES = folded("""
van von der den de del di da das dos du le la ter ten af av bin ibn bint al el abu ap o y e
""")
# A greeting or sign-off: a name after it counts, in any case ("signed, jukka"), and so does a
# capitalised unknown word ("Hi Lindokuhle,").
GREETINGS = folded("hi hello hey dear hallo hola bonjour ciao hej moi attn")
SIGNOFFS = folded("thanks thank thx regards signed cheers sincerely best yours greetings kind")
# Words after which one name counts: "called maria", "ask Virtanen", "from Nagy".
STRONG_CUES = folded("called named cc bcc") | GREETINGS | SIGNOFFS
WEAK_CUES = folded("""
from by with contact ask asked call calling email emailed mail ping pinged tell told thank thanked meet met meeting
onboarding offboarding welcome welcoming introducing introduce
spoke speak talked talk escalated assigned per cc'd customer client colleague caller user champion manager owner
assignee reporter requester approver reviewer author attendee attendees participant participants rep agent
contacts employee engineer
""")
# Label words: "Owner: Nagy Katalin", "Assignee: jukka".
LABELS = folded("""
owner assignee contact author reporter requester approver reviewer attendee attendees participants participant
name from to customer client caller user employee manager agent rep cc bcc signed present absent attendee
apologies items
""")
# Words after a name that show a person: "Virtanen will send", "Nagy's team", "Elina from our team".
PERSON_VERBS = folded("""
said says asked asks wrote writes confirmed confirms agreed agrees wants wanted will would can could should
called calls emailed replied replies responded mentioned approved signed sent sends shared requested requests
reported joined left noted promised prefers preferred needs needed suggested explained complained phoned rang
accepted accepts declined thinks thought knows knew told tells likes works leads manages owns is was has had
from who himself herself
""")
PERSONAL_VERBS = folded("""
said says asked asks wrote writes agreed agrees confirmed confirms wants wanted promised prefers preferred thinks
thought called calls emailed replied replies mentioned complained explained suggested told tells phoned rang
""")
# Company suffixes and business nouns: a name next to one of them names a company.
COMPANY_WORDS = folded("""
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
ORG_BEFORE = folded("""
bank banco banca banque grupo gruppo groupe gruppe hotel cafe café studio university college hospital
san santa santo são sao saint st ste fort mount mt lake port cape camp lago monte rio villa
grupa gabinety ppuh firma consultoria proyectos construcciones inversiones transportes comercial industrias
royal ооо оао зао пао ао нпо ип рао club comercial compañía corporación despacho fpuh familia fundacja hnos
industrias koninklijke laboratorio perum spółdzielnia stichting stowarzyszenie
""")
# Product words after a name: "Atlas Pro", "Toyota Prius", "Apple Watch".
PRODUCT_WORDS = folded("""
pro max mini plus ultra lite air edition series model suite cloud watch phone pad book tab drive connect
connector gateway hub manager server desk platform app apps plugin add-on addon sync vault prius transit
sprinter cruiser galaxy pixel surface thinkpad ideapad inspiron latitude xps macbook imac ipad iphone kindle
""")
# Role words after a name do not make it a company: "Anna Nowak CEO".
ROLE_WORDS = folded("""
ceo cfo cto coo cio ciso vp svp evp md gm head director manager lead chief president founder owner engineer
consultant analyst architect counsel partner intern assistant officer admin
""")
# Nouns that WordNet also lists as names and that are frequent English words: names only beside a
# title or another name (see gazetteer.py).
COMMON_NOUNS = folded("""
king queen prince princess duke earl baron lord lady knight bishop priest pastor deacon admiral colonel captain
major general governor senator mayor judge justice sheriff marshal master mountain river lake park street field
fields wood woods hill hills stone rock brook bridge bridges ford church hall gates house home garden meadow
forest ocean sky star sun moon rain snow storm winter summer spring autumn fall season faith hope grace joy glory
charity honor honour mercy liberty victory trinity destiny harmony melody patience prudence chastity serenity
unity fortune treasure diamond crystal pearl ruby amber jade coral ivory silver gold golden copper iron steel
money cash lock bond
""")
# Business and calendar words: never a name.
BUSINESS_AND_CALENDAR = folded("""
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
BRANDS = folded("""
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
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
DIGIT = re.compile(r"\d")
_CAMEL = re.compile(r"[a-z][A-Z]")
NAME_CAMEL = re.compile(r"^(?:Mc|Mac|De|Di|Da|Du|Le|La|Van|Von|O['’]|D['’]|L['’]|Al-|El-)[A-Z]")


def camel(word: str) -> bool:
    """CamelCase inside a word ("ThinkPad", "HubSpot"), but not a name's ("McKinsey", "DeVries")."""
    m = NAME_CAMEL.match(word)
    return bool(_CAMEL.search(word, m.end() if m else 0))
