"""Where the embedded engine (regorus, as the gateway calls it) and OPA evaluate Rego differently,
as OPA's own conformance cases show them: the one list that

- `gateway policy check` reads, to warn where a module uses one of these constructs
  (gateway/policy_tools/check.py, code `engine-divergence/<code>`);
- bench/opa_conformance.py reads, to file each case the embedded engine fails under one;
- tests/policies/test_opa_conformance.py holds the embedded engine to: it fails exactly the cases
  listed here, the check warns on each of them (but the few in `unseen`), and each construct is
  written up in docs/writing-policies.md ("Engine differences") with its example.

Each entry names the construct as a policy writes it, what the embedded engine does where OPA does
otherwise, one line of Rego that shows it, and how the check finds it: a regular expression over the
module with its comments blanked, and its string contents too unless `strings` (a match whose `ok`
group took part is not one: the context that makes it safe; nor one whose `name` group is a rule,
function or import of the module itself). `cases` are the conformance cases of
OPA's pinned version (scripts/engines) that fail on the embedded engine because of it, as fnmatch
patterns over the case names bench/opa_conformance.py gives (OPA's note, with " #N" where notes
repeat).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

GROUPS = (
    "Syntax the embedded engine does not read",
    "Built-ins the embedded engine does not have",
    "Built-ins that answer differently",
    "Evaluation",
)
CALL = r"(?<![\w.])(?:{names})\s*\("


def calls(*names: str) -> re.Pattern[str]:
    """A call of any of these functions (not a rule or a reference that merely ends in the name)."""
    return re.compile(CALL.format(names="|".join(re.escape(n) for n in names)))


@dataclass(frozen=True)
class Difference:
    code: str  # the finding's code is "engine-divergence/<code>"
    group: str  # one of GROUPS: how docs/writing-policies.md orders them
    construct: str  # as a policy writes it
    embedded: str  # what the embedded engine does, against OPA (one line)
    example: str  # one line of Rego that shows it
    pattern: re.Pattern[str]  # where a module uses it (see the module's docstring)
    cases: tuple[str, ...]  # OPA's conformance cases failing on the embedded engine because of it
    strings: bool = False  # the pattern reads string contents (a format, a glob, a number in a JSON text)
    unseen: tuple[str, ...] = field(default=())  # of `cases`, those the pattern cannot find (listed, with why, in the docs)

    def finds(self, name: str) -> bool:
        return any(fnmatchcase(name, pattern) for pattern in self.cases)

    def warning(self, used: str) -> str:
        """The check's message: the construct, what the embedded engine does, and what was found."""
        found = " ".join(used.split()).rstrip("( ")
        return f"{self.construct}: {self.embedded} (found `{found[:60]}`)"


KEYWORDS = "as|default|else|every|false|if|import|in|not|null|package|some|true|with"

DIFFERENCES: tuple[Difference, ...] = (
    # ---------------------------------------------------------------- syntax
    Difference(
        code="and-or",
        group=GROUPS[0],
        construct="`and` / `or` between expressions (import future.keywords.and, future.keywords.or, rego.v2)",
        embedded="the module does not load; OPA reads them",
        example="p if input.x > 0 or input.y > 0",
        pattern=re.compile(
            r"(?m)^[ \t]*import[ \t]+(?:future\.keywords\.(?:and|or)|rego\.v2)\b"
            r"|(?<=[\w\])}\"])[ \t]+(?:and|or)[ \t]+(?=[\w\[({\"])"
        ),
        cases=(
            "logic_op/*",
            "negation/rego_v2_import: not body, *",
        ),
    ),
    Difference(
        code="not-body",
        group=GROUPS[0],
        construct="`not { ... }`, a negated body (import future.keywords.not)",
        embedded="the module does not load, or `{ false }` is read as a set, which `not` makes false (OPA: true)",
        example="p if not { false }",
        pattern=re.compile(r"\bnot\s*\{"),
        cases=("negation/not-body: explicit body*",),
    ),
    Difference(
        code="template-string",
        group=GROUPS[0],
        construct='template strings `$"..."`',
        embedded="the module (or query) does not load",
        example='msg := $"user {input.user} may not read {input.path}"',
        pattern=re.compile(r"\$[\"`]"),
        cases=("string-interpolation/*",),
    ),
    Difference(
        code="keyword-ref",
        group=GROUPS[0],
        construct="a keyword as a rule name or a reference part outside data (`else.foo`, `foo.as := 1`)",
        embedded="the module does not load; OPA reads keywords there as names (data.foo.not.bar loads on both)",
        example="foo.default := 1",
        pattern=re.compile(
            rf"(?P<ok>^[ \t]*(?:package|import)\b[^\n]*|\bdata(?:\.\w+)+)"
            rf"|(?<![\w.])(?:{KEYWORDS})\.[A-Za-z_]|(?<=[\w\]\)])\.(?:{KEYWORDS})\b",
            re.M,
        ),
        cases=("keywordrefs/[!c]* keyword *refhead*",),
    ),
    Difference(
        code="big-number",
        group=GROUPS[0],
        construct="numbers beyond float64 (`1e400`, `2e308`), in a module or a JSON text",
        embedded="the module does not load, json.unmarshal fails the evaluation; OPA keeps them (integers of any size work on both)",
        example="p := 1e400 > 1e399",
        pattern=re.compile(r"(?<![\w.])\d+(?:\.\d+)?[eE]\+?(?:30[89]|3[1-9]\d|[4-9]\d\d|\d{4,})(?![\w.])"),
        strings=True,
        cases=(
            "comparisonexpr/decimals order like the numbers they denote",
            "jsonbuiltins/unmarshal number beyond the supported exponent is undefined",
            "jsonbuiltins/unmarshal number with large exponent within limits",
            "jsonbuiltins/unmarshal number with too big an exponent is undefined",
            "strings/sprintf: float too big",
        ),
    ),
    Difference(
        code="leading-dot",
        group=GROUPS[0],
        construct="a number written without its leading zero (`.5`)",
        embedded="the module does not load",
        example="p := [0.0, .5]",
        pattern=re.compile(r"(?<=[\s,(\[{:=+\-*/<>])\.\d"),
        cases=("sprintf/float/zero_fraction",),
    ),
    # ---------------------------------------------------------------- built-ins it does not have
    Difference(
        code="no-crypto-hash",
        group=GROUPS[1],
        construct="crypto.md5, crypto.sha1, crypto.sha256, crypto.hmac.*",
        embedded="not built-ins of the embedded engine: the evaluation fails",
        example='digest := crypto.sha256("text")',
        pattern=calls(
            "crypto.md5",
            "crypto.sha1",
            "crypto.sha256",
            "crypto.hmac.md5",
            "crypto.hmac.sha1",
            "crypto.hmac.sha256",
            "crypto.hmac.sha512",
            "crypto.hmac.equal",
        ),
        cases=(
            "cryptohmacequal/*",
            "cryptohmacmd5/*",
            "cryptohmacsha1/*",
            "cryptohmacsha256/*",
            "cryptohmacsha512/*",
            "cryptomd5/*",
            "cryptosha1/*",
            "cryptosha256/*",
        ),
    ),
    Difference(
        code="no-crypto-x509",
        group=GROUPS[1],
        construct="crypto.x509.*, crypto.parse_private_keys",
        embedded="not built-ins of the embedded engine: the evaluation fails",
        example="certs := crypto.x509.parse_certificates(input.pem)",
        pattern=re.compile(r"(?<![\w.])(?:crypto\.x509\.\w+|crypto\.parse_private_keys)\s*\("),
        cases=(
            "cryptoX509ParseKeyPairs/*",
            "cryptoparseprivatekey/*",
            "cryptox509parseandverifycertificates/*",
            "cryptox509parsecertificaterequest/*",
            "cryptox509parsecertificates/*",
            "cryptox509parsersaprivatekey/*",
        ),
    ),
    Difference(
        code="no-jwt",
        group=GROUPS[1],
        construct="io.jwt.* (decode, decode_verify, verify_*, encode_sign*)",
        embedded="not built-ins of the embedded engine: the evaluation fails",
        example="[header, payload, sig] := io.jwt.decode(input.token)",
        pattern=re.compile(r"(?<![\w.])io\.jwt\.\w+\s*\("),
        cases=(
            "jwtbuiltins/*",
            "jwtdecodeverify/*",
            "jwtencodesign/*",
            "jwtencodesignheadererrors/*",
            "jwtencodesignpayloaderrors/*",
            "jwtencodesignraw/*",
            "jwtverifyeddsa/*",
            "jwtverifyhs256/*",
            "jwtverifyhs384/*",
            "jwtverifyhs512/*",
            "jwtverifyrsa/*",
            "set data",
            "withkeyword/builtin: nested, multiple mocks",
        ),
    ),
    Difference(
        code="no-graphql",
        group=GROUPS[1],
        construct="graphql.*",
        embedded="not built-ins of the embedded engine: the evaluation fails",
        example="graphql.is_valid(input.query, data.schema)",
        pattern=re.compile(r"(?<![\w.])graphql\.\w+\s*\("),
        cases=(
            "graphql_is_valid/*",
            "graphql_parse/*",
            "graphql_parse_and_verify/*",
            "graphql_parse_query/*",
            "graphql_parse_schema/*",
            "graphql_schema_is_valid/*",
        ),
    ),
    Difference(
        code="no-net",
        group=GROUPS[1],
        construct="net.cidr_merge, net.cidr_intersects, net.cidr_overlap, net.cidr_contains_matches, net.lookup_ip_addr",
        embedded="not built-ins of the embedded engine: the evaluation fails (net.cidr_contains, cidr_expand, cidr_is_valid are)",
        example='net.cidr_intersects("10.0.0.0/8", input.cidr)',
        pattern=calls(
            "net.cidr_merge", "net.cidr_intersects", "net.cidr_overlap", "net.cidr_contains_matches", "net.lookup_ip_addr"
        ),
        cases=(
            "net.lookup_ip_addr/*",
            "netcidrcontainsmatches/*",
            "netcidrintersects/*",
            "netcidrmerge/*",
        ),
    ),
    Difference(
        code="no-uri",
        group=GROUPS[1],
        construct="uri.parse, uri.is_valid",
        embedded="not built-ins of the embedded engine: the evaluation fails",
        example="u := uri.parse(input.url)",
        pattern=calls("uri.parse", "uri.is_valid"),
        cases=("uribuiltins/*",),
    ),
    Difference(
        code="no-strings",
        group=GROUPS[1],
        construct="strings.render_template, strings.split_n",
        embedded="not built-ins of the embedded engine: the evaluation fails",
        example='parts := strings.split_n(input.path, "/", 2)',
        pattern=calls("strings.render_template", "strings.split_n"),
        cases=(
            "rendertemplate/*",
            "strings/split_n/*",
        ),
    ),
    Difference(
        code="no-array-flatten",
        group=GROUPS[1],
        construct="array.flatten",
        embedded="not a built-in of the embedded engine: the evaluation fails",
        example="flat := array.flatten([[1], [2, [3]]])",
        pattern=calls("array.flatten"),
        cases=("array/flatten *",),
    ),
    Difference(
        code="no-globs-match",
        group=GROUPS[1],
        construct="regex.globs_match",
        embedded="not a built-in of the embedded engine: the evaluation fails",
        example='regex.globs_match("a.*", "a.b*")',
        pattern=calls("regex.globs_match"),
        cases=("globsmatch/*",),
    ),
    Difference(
        code="no-rego-metadata",
        group=GROUPS[1],
        construct="rego.metadata.chain, rego.metadata.rule, rego.parse_module",
        embedded="not built-ins of the embedded engine: the evaluation fails",
        example="annotations := rego.metadata.rule()",
        pattern=calls("rego.metadata.chain", "rego.metadata.rule", "rego.parse_module"),
        cases=(
            "regometadatachain/*",
            "regometadatarule/*",
            "regoparsemodule/*",
        ),
    ),
    Difference(
        code="no-aws-sign",
        group=GROUPS[1],
        construct="providers.aws.sign_req",
        embedded="not a built-in of the embedded engine: the evaluation fails",
        example="req := providers.aws.sign_req(request, config, time.now_ns())",
        pattern=calls("providers.aws.sign_req"),
        cases=("providers-aws-sign_req/*",),
    ),
    Difference(
        code="http-send",
        group=GROUPS[1],
        construct="http.send",
        embedded="sends nothing and is undefined, even for a request OPA refuses as malformed (an error there)",
        example='resp := http.send({"method": "get", "url": input.url})',
        pattern=re.compile(r"(?<![\w.])http\.send\b"),
        cases=("invalidkeyerror/*",),
    ),
    # ---------------------------------------------------------------- built-ins that answer differently
    Difference(
        code="builtin-error",
        group=GROUPS[2],
        construct="regex.match with an invalid pattern, strings.any_prefix_match / any_suffix_match given a non-string, "
        "count or any built-in given a bad argument",
        embedded="the whole evaluation fails (503) where OPA leaves the expression undefined and goes on",
        example='regex.match("[", input.name)',
        pattern=calls("regex.match", "strings.any_prefix_match", "strings.any_suffix_match"),
        cases=(
            "regexmatch/regex.match bad RE",
            "strings/any_prefix_match/single string type_error_nostrict after match",
            "strings/any_prefix_match/type_error_nostrict #2",
            "strings/any_prefix_match/type_error_nostrict #4",
            "strings/any_suffix_match/single string type_error_nostrict after match",
            "strings/any_suffix_match/type_error_nostrict #1",
            "strings/any_suffix_match/type_error_nostrict #2",
            "strings/any_suffix_match/type_error_nostrict #3",
            "strings/any_suffix_match/type_error_nostrict #4",
            "withkeyword/builtin: nested, mock function calls original",
        ),
        unseen=("withkeyword/builtin: nested, mock function calls original",),
    ),
    Difference(
        code="strings-count",
        group=GROUPS[2],
        construct="strings.count",
        embedded='counts overlapping matches (`strings.count("11111", "11")` is 4, OPA 2); an empty substring panics '
        "inside regorus: the policy process dies (503) and is started again",
        example='n := strings.count(input.text, "ab")',
        pattern=calls("strings.count"),
        cases=(
            "strings/count_empty_string",
            "strings/count_empty_string_twice",
            "strings/count_odd_even_case",
        ),
    ),
    Difference(
        code="replace-n",
        group=GROUPS[2],
        construct="strings.replace_n",
        embedded="replaces one pattern after another, so a replacement can be replaced again; OPA replaces in one pass",
        example='strings.replace_n({"a": "b", "b": "a"}, "abba")  # embedded "aaaa", OPA "baab"',
        pattern=calls("strings.replace_n"),
        cases=(
            "replacen/semantics/no chained replacements",
            "replacen/semantics/overlapping keys",
            "replacen/semantics/replaced output is not re-scanned",
            "replacen/semantics/shorter key sorted first wins",
        ),
    ),
    Difference(
        code="range-step-big",
        group=GROUPS[2],
        construct="numbers.range_step with a step beyond 64 bits",
        embedded="the evaluation fails; OPA answers the range (`[0]` for a step past the end)",
        example="numbers.range_step(0, 10, 99999999999999999999)",
        pattern=re.compile(r"(?<![\w.])numbers\.range_step\s*\([^)]*\d{20,}"),
        cases=("numbersrangestep/big int step",),
    ),
    Difference(
        code="sprintf-float",
        group=GROUPS[2],
        construct="sprintf with %f, %e or %g of a whole number",
        embedded='formats it as an integer: `sprintf("%f", [1e2])` is "100" (OPA "100.000000")',
        example='sprintf("%.2f", [input.amount])',
        pattern=re.compile(r"(?<![\w.])sprintf\s*\(\s*([\"`])(?:(?!\1)[^\\]|\\.)*?%[-+# 0]*\d*(?:\.\d+)?[eEfFgG]"),
        strings=True,
        cases=("sprintf/float/exponent",),
    ),
    Difference(
        code="json-schema",
        group=GROUPS[2],
        construct="json.match_schema, json.verify_schema",
        embedded="other result shapes: errors as strings, null (not []) on a match; an invalid schema fails the evaluation",
        example="[ok, errors] := json.match_schema(input.document, data.schema)",
        pattern=calls("json.match_schema", "json.verify_schema"),
        cases=(
            "json_match_schema/invalid document",
            "json_match_schema/success",
            "json_match_schema/success string document",
            "json_match_schema/success string schema",
            "json_verify_schema/invalid schema object",
            "json_verify_schema/invalid schema string",
        ),
    ),
    Difference(
        code="is-valid",
        group=GROUPS[2],
        construct="json.is_valid, yaml.is_valid, semver.is_valid",
        embedded="a non-string fails the evaluation (OPA: false); yaml.is_valid is false for several YAML documents",
        example="json.is_valid(input.body)",
        pattern=calls("json.is_valid", "yaml.is_valid", "semver.is_valid"),
        cases=(
            "jsonbuiltins/json is_valid not string",
            "jsonbuiltins/yaml is_valid not string",
            "jsonbuiltins/yaml is_valid unreachable content",
            "semverisvalid/invalid type",
        ),
    ),
    Difference(
        code="units-parse",
        group=GROUPS[2],
        construct="units.parse, units.parse_bytes",
        embedded="a string it cannot parse fails the evaluation (OPA: undefined); an exponent too large is accepted (OPA: error)",
        example="units.parse_bytes(input.limit)",
        pattern=calls("units.parse", "units.parse_bytes"),
        cases=(
            "functionerrors/undefined builtin result",
            "units_parse/exponent too large",
            "units_parse_bytes/exponent too large",
        ),
    ),
    Difference(
        code="uuid-parse",
        group=GROUPS[2],
        construct="uuid.parse",
        embedded="a non-string fails the evaluation (OPA: undefined); a UUID in parentheses or braces is undefined",
        example="uuid.parse(input.id)",
        pattern=calls("uuid.parse"),
        cases=(
            "uuid-parse/negative",
            "uuid-parse/positive-v4-38-bytes-without-braces",
        ),
    ),
    Difference(
        code="glob-empty-alternative",
        group=GROUPS[2],
        construct="glob.match with an empty alternative (`{a,}`)",
        embedded="the empty alternative never matches",
        example='glob.match("{**/,}x", null, "x")  # embedded false, OPA true',
        pattern=re.compile(r"(?<![\w.])glob\.match\s*\(\s*[\"`][^\"`]*(?:\{,|,\})"),
        strings=True,
        cases=("globmatch/empty pattern alternative",),
    ),
    Difference(
        code="walk-assign",
        group=GROUPS[2],
        construct="walk used as a value (`[path, value] := walk(x)`)",
        embedded="yields nothing; write walk(x, [path, value])",
        example="[path, value] := walk(input)",
        pattern=re.compile(r"(?<![=!<>]):?=\s*walk\s*\("),
        cases=("walkbuiltin/array path not overwritten",),
    ),
    # ---------------------------------------------------------------- evaluation
    Difference(
        code="set-key-membership",
        group=GROUPS[3],
        construct="`key, value in {set}` as a test (not after some or every)",
        embedded='undefined for a set (OPA: true when both are the element, `"a", "a" in {"a"}`)',
        example='"a", "a" in {"a", "b"}',
        pattern=re.compile(r"(?P<ok>\b(?:some|every)\s+)?(?:\"[^\"\n]*\"|[\w\]]+)\s*,\s*(?:\"[^\"\n]*\"|\w+)\s+in\s+\{[^:{}]*\}"),
        cases=("aggregates/member check set with with both key and value",),
    ),
    Difference(
        code="with-builtin",
        group=GROUPS[3],
        construct="`with <function> as <built-in>`: a built-in as the replacement",
        embedded="the evaluation fails (the built-in is read as an undefined variable); a rule or function as the replacement works",
        example="f(x) with f as count",
        pattern=re.compile(
            r"\bwith\s+(?!input\b|data\b)[A-Za-z_][\w.]*\s+as\s+(?P<name>(?!input\b|data\b|true\b|false\b|null\b)[A-Za-z_]\w*)(?:\.\w+)*(?![\w.(\[])"
        ),
        cases=(
            "withkeyword/builtin-builtin: arity 0",
            "withkeyword/builtin-builtin: arity 1, replacement is compound",
            "withkeyword/builtin-builtin: arity 1, replacement is simple",
            "withkeyword/function: direct call, built-in replacement, arity 1",
            "withkeyword/function: direct call, built-in replacement, arity 1, result captured",
        ),
    ),
    Difference(
        code="not-unify",
        group=GROUPS[3],
        construct="`not x = ...` where x is bound later in the body",
        embedded="binds x inside the negation, so the negation fails (OPA evaluates the later binding first)",
        example="p := a if { not a = f(1); a = f(2) }",
        pattern=re.compile(r"\bnot\s+(?!true\b|false\b|null\b)[A-Za-z_]\w*\s*=(?!=)"),
        cases=("negation/not-body: negated and non-negated unification on same var, calls, rearranged",),
    ),
    Difference(
        code="ref-head-set",
        group=GROUPS[3],
        construct="a general ref head with a variable and `contains` (`p[q].r contains s`), read into the set",
        embedded="data.test.p.b.r.c is undefined where OPA answers the element",
        example="p[q].r contains s if { some q, s in input.pairs }",
        pattern=re.compile(r"(?m)^[A-Za-z_]\w*(?:\.\w+)*\[[^\]\n]+\](?:\.\w+|\[[^\]\n]+\])+\s+contains\b"),
        cases=("refheads/general, set leaf, deep query",),
    ),
)


def difference_of(name: str) -> Difference | None:
    """The known difference a conformance case is filed under, if any."""
    return next((d for d in DIFFERENCES if d.finds(name)), None)
