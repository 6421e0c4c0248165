"""Settings, read once at start-up from flags and GATEWAY_ environment variables."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType, UnionType
from typing import Any, Mapping, get_args, get_type_hints
from urllib.parse import urlsplit

from core.errors import ConfigurationError

PROJECT_POLICIES = Path(__file__).resolve().parent.parent / "policies"
BUDGET_SOURCES = ("memory", "document", "external", "property", "graph")
DEFAULT_SPLIT = "memory=35,document=30,external=20,property=10,graph=5"


@dataclass(frozen=True)
class StoreSettings:
    """Where the store is: a data directory (the embedded SQLite file, the integer model) or a database."""

    data_dir: Path = Path(".gateway")
    database_url: str | None = None

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'gateway.db').resolve()}"


@dataclass(frozen=True)
class ServerSettings:
    """The HTTP service: where it listens, how it names itself, what it reads, how it stops."""

    host: str = "127.0.0.1"
    port: int = 8080
    # The gateway's own public `scheme://host[:port]`, as clients reach it through its ingress: the
    # base of the URLs it names of itself (the OAuth protected-resource metadata of /mcp). Unset, a
    # request's own scheme and Host stand in, which only a gateway reached under one name can trust.
    public_url: str | None = None
    max_body_bytes: int = 1024 * 1024
    body_timeout_ms: int = 30_000  # the longest a request body may take to arrive, read before any seat is taken
    header_timeout_ms: int = 10_000  # the longest a request's headers may take to arrive (gateway serve)
    drain_seconds: int = 30
    # The MCP server at /mcp (gateway/http/mcp.py), and the browser origins it answers: a comma list
    # of `scheme://host[:port]` (`:*` for any port). A request with no Origin (an agent, not a
    # browser page) is always heard; none is allowed by default, as a page could be rebinding DNS.
    mcp: bool = True
    mcp_allowed_origins: str = ""
    # What the process logs (gateway/logs.py): the level of the gateway's own lines (libraries stay at
    # WARNING), and `text` or `json` (one object a line) for every line, the access line included.
    log_level: str = "info"
    log_format: str = "text"

    @property
    def mcp_origins(self) -> frozenset[str]:
        return parse_origins(self.mcp_allowed_origins)


@dataclass(frozen=True)
class AuthSettings:
    """JWTs beside the API keys: the HS256 secret or RS256 public key, and the claims they must carry."""

    jwt_secret: str | None = None
    jwt_public_key: str | None = None
    jwt_audience: str | None = None
    jwt_issuer: str | None = None

    @property
    def jwt_enabled(self) -> bool:
        return bool(self.jwt_secret or self.jwt_public_key)


@dataclass(frozen=True)
class PolicySettings:
    """The policy: where it is read from, which engine decides, reloads, and the decision log."""

    policies_dir: Path = PROJECT_POLICIES
    opa_url: str | None = None
    opa_timeout_ms: int = 500
    opa_push_policies: bool = True
    # Hot reload (gateway/policy/reload.py): an OPA bundle file or bundle server URL instead of the
    # policies directory, the key its signature must verify with, and how often to look for a new
    # revision (a bundle URL: every 30 s unless set; a directory or file: only when set).
    policy_bundle: str | None = None
    policy_bundle_key: str | None = None
    policy_bundle_key_alg: str = "RS256"
    policy_bundle_scope: str | None = None
    policy_poll_seconds: int | None = None
    policy_compiled: bool = True  # the embedded engine verifies on regorus's compiled path (gateway/policy/compiled.py)
    # The tenant whose policy_admin keys run the platform: they alone reload the policy (which every
    # tenant shares) over HTTP and see where it is read from (gateway/http/routes/operations.py).
    platform_tenant: str = "platform"
    impact_deadline_seconds: int = 120
    decision_log: Path | None = None
    decision_log_url: str | None = None
    decision_log_buffer: int = 10_000

    @property
    def policy_poll_interval(self) -> int | None:
        """Seconds between looks for a new policy revision; None: only on SIGHUP or a reload call."""
        if self.policy_poll_seconds is not None:
            return self.policy_poll_seconds
        return 30 if self.policy_bundle and self.policy_bundle.startswith(("http://", "https://")) else None


@dataclass(frozen=True)
class AdmissionSettings:
    """Admission (gateway/admission/): the process's seats (admission units in flight at once; a light
    call is 1 unit), shared by fair queuing; the units a tenant may have waiting and how long a call
    waits before it is refused; optional caps and rate quotas per tenant and per actor (None: none)."""

    admission_capacity: int = 8
    admission_queue_units: int | None = None  # None: 8 calls' worth per seat of capacity
    admission_queue_wait_ms: int = 10_000
    admission_tenant_concurrency: int | None = None
    admission_actor_concurrency: int | None = None
    admission_tenant_rate: int | None = None
    admission_actor_rate: int | None = None
    admission_background_share: float = 0.5  # of the seats, the most background work may hold


@dataclass(frozen=True)
class RetrievalSettings:
    """A retrieve call: the sources' deadline, the budget and its split, cursors, the relevance floor."""

    connector_deadline_ms: int = 250
    default_budget_bytes: int = 16_000
    budget_split: str = DEFAULT_SPLIT
    cursor_idle_seconds: int = 3600
    cursor_max_per_actor: int = 100
    semantic_floor: float | None = None  # None: the embedding model's calibrated floor (bench/README.md)
    # `vectors`: after the verify, the allowed candidates are ranked again by the query's cosine with
    # their stored vectors (gateway/pipeline/fuse.py); `off`: plain reciprocal rank fusion.
    rerank: str = "vectors"

    @property
    def budget_shares(self) -> Mapping[str, float]:
        return parse_split(self.budget_split)


@dataclass(frozen=True)
class EmbeddingSettings:
    """Semantic search: the model (or a remote endpoint), where vectors are indexed, and the worker."""

    # `bge-small` bge-small-en-v1.5 (int8) fetched from the Maven registry (gateway/writes/maven_model.py),
    # `minilm` the packaged MiniLM re-quantized for integer arithmetic (gateway/writes/integer_model.py),
    # `minilm-float` the packaged graph as shipped (float arithmetic), `none` semantic search off.
    embeddings: str = "bge-small"
    # Where fetched and converted model files are kept, once per user: default the user's cache
    # ($XDG_CACHE_HOME or ~/.cache)/governed-gateway/models.
    model_dir: Path | None = None
    model_registry: str = "https://repo1.maven.org/maven2"  # a Maven repository (or a mirror of one)
    embeddings_url: str | None = None
    embeddings_model: str | None = None
    embeddings_key: str | None = None
    embeddings_key_file: Path | None = None  # the key read from a file instead (a mounted secret), stripped
    embeddings_dims: int | None = None
    embeddings_timeout_ms: int = 2000  # the deadline of each request (a batch, or a query) to the endpoint
    # Bulk embedding through the endpoint (`gateway embed`, the background worker): texts per request,
    # requests in flight at once, and the attempts a batch gets (retried with backoff on a connection
    # error, a timeout, a 429 or a 5xx; never on another 4xx). A query's embedding is one request.
    embeddings_batch: int = 64
    embeddings_concurrency: int = 4
    embeddings_attempts: int = 4
    background_embedding: bool = True
    # Where semantic search runs (unless weaviate_url is set): `memory` the in-process index,
    # `pgvector` an HNSW index inside PostgreSQL, `auto` pgvector when the store has the extension.
    vector_index: str = "auto"
    # pgvector's index: `hnsw` (a graph) or `ivfflat` (k-means lists, for stores with crowds of
    # near-duplicate vectors; built from the rows present, re-indexed when the store grows much).
    pgvector_index: str = "hnsw"
    # What ranks lexical search: `tantivy` (top-k with the filter inside the query, an in-memory
    # index per tenant and process, the store's own engine answering while it builds) or `store`
    # (`fts5`) alone: FTS5 on SQLite, ts_rank_cd on PostgreSQL. `auto`: tantivy on either store.
    lexical_engine: str = "auto"
    weaviate_url: str | None = None
    weaviate_grpc_port: int = 50051
    weaviate_api_key: str | None = None
    weaviate_collection: str = "GatewayItem"


@dataclass(frozen=True)
class PrivacySettings:
    """Personal data: the analyzer, and whether stored items are analysed in the background."""

    pii: str = "presidio"
    pii_background: bool = True
    # Processes the background analysis runs in: 1 in the serving process itself; more, a pool of
    # that many beside it (spaCy holds the GIL). None: one per core this process may use.
    pii_processes: int | None = None


@dataclass(frozen=True)
class AuditSettings:
    """The audit trail: its keys, retention, the audit page's sessions, signed checkpoints, a witness."""

    audit_key: str | None = None
    audit_retention_days: int = 400
    audit_session_minutes: int = 60
    audit_session_key: str | None = None
    audit_signing_key: Path | None = None
    audit_checkpoints: Path | None = None
    audit_checkpoint_rows: int = 100
    audit_checkpoint_seconds: int = 60
    audit_witness_url: str | None = None
    audit_previous_keys: str | None = None  # comma-separated public key files: keys the signing key replaced


@dataclass(frozen=True)
class SynthesisSettings:
    """The chat endpoint an answer is synthesized with, if any."""

    llm_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_key: str | None = None
    llm_timeout_ms: int = 20_000


@dataclass(frozen=True)
class TelemetrySettings:
    """OpenTelemetry: the exporter and where it sends; the Prometheus scrape of the same metrics."""

    otel_exporter: str = "none"
    otel_endpoint: str | None = None
    otel_service_name: str = "governed-gateway"
    # GET /metrics: the same instruments in the Prometheus text format, on the main port.
    metrics: bool = True
    # The tenant as a label of the per-call series: one series per tenant, so off unless asked.
    metrics_tenant_label: bool = False


# The groups, each a concern; Settings is all of them (its bases in reverse, so its fields come in this order).
GROUPS: tuple[type, ...] = (
    StoreSettings,
    ServerSettings,
    AuthSettings,
    PolicySettings,
    AdmissionSettings,
    RetrievalSettings,
    EmbeddingSettings,
    PrivacySettings,
    AuditSettings,
    SynthesisSettings,
    TelemetrySettings,
)


@dataclass(frozen=True)
class Settings(
    TelemetrySettings,
    SynthesisSettings,
    AuditSettings,
    PrivacySettings,
    EmbeddingSettings,
    RetrievalSettings,
    AdmissionSettings,
    PolicySettings,
    AuthSettings,
    ServerSettings,
    StoreSettings,
):
    """Every setting. Each concern is a frozen value of its own (the groups above); a Settings is each
    of them, so a component is typed to read only its group (`load_admission(settings:
    AdmissionSettings)`). Every field is the variable `GATEWAY_<NAME>`, read once at start-up."""

    @property
    def effective_model_dir(self) -> Path:
        return self.model_dir if self.model_dir is not None else user_model_dir({})


@cache
def parse_split(text: str) -> Mapping[str, float]:
    """`memory=35,document=30,...` as fractions of one; every source named once, shares > 0 in all.
    Cached: the setting is parsed once, not on every request that packs."""
    shares: dict[str, float] = {}
    for part in text.split(","):
        name, _, number = part.strip().partition("=")
        if name not in BUDGET_SOURCES or name in shares:
            raise ConfigurationError(
                f"GATEWAY_BUDGET_SPLIT: unknown or repeated source {name!r}; use {', '.join(BUDGET_SOURCES)}"
            )
        try:
            shares[name] = float(number)
        except ValueError as exc:
            raise ConfigurationError(f"GATEWAY_BUDGET_SPLIT: share of {name} is not a number") from exc
        if shares[name] < 0:
            raise ConfigurationError(f"GATEWAY_BUDGET_SPLIT: share of {name} is negative")
    total = sum(shares.values())
    if total <= 0:
        raise ConfigurationError("GATEWAY_BUDGET_SPLIT: the shares add up to nothing")
    return MappingProxyType({name: shares.get(name, 0.0) / total for name in BUDGET_SOURCES})


# A host name or bracketed IP literal and an optional port: nothing that could close a quoted string
# or start another header parameter (a quote, a comma, a space), where a URL built on it is quoted.
HOST = re.compile(r"([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?", re.ASCII)
PUBLIC_URL = re.compile(rf"https?://{HOST.pattern}/?", re.ASCII)


def _port_in_range(url: str) -> bool:
    try:
        urlsplit(url).port  # noqa: B018  (raises past 65535)
    except ValueError:
        return False
    return True


ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:([0-9]{1,5}|\*))?|https?://\[[0-9A-Fa-f:.]+\](:([0-9]{1,5}|\*))?", re.ASCII)


@cache
def parse_origins(text: str) -> frozenset[str]:
    """`https://agents.example.com,http://localhost:*` as a set of origins, each as a browser sends it."""
    origins = frozenset(part.strip() for part in text.split(",") if part.strip())
    for origin in origins:
        if not ORIGIN.fullmatch(origin):
            raise ConfigurationError(
                f"GATEWAY_MCP_ALLOWED_ORIGINS: {origin!r} is not an origin such as https://agents.example.com"
            )
    return origins


def _convert(name: str, raw: str, kind: Any) -> Any:
    """The variable's text as the field's own type (its annotation, resolved): a bool from 1/0,
    true/false, yes/no, on/off; an int above 0; a float from -1 to 1; a Path; else the text."""
    if isinstance(kind, UnionType):  # `int | None`: a variable sets the value, never None
        kind = next(arg for arg in get_args(kind) if arg is not type(None))
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered not in {"1", "0", "true", "false", "yes", "no", "on", "off"}:
                raise ValueError(raw)
            return lowered in {"1", "true", "yes", "on"}
        if kind is float:
            number = float(raw)
            if not -1.0 <= number <= 1.0:
                raise ValueError(raw)
            return number
        if kind is int:
            value = int(raw)
            if value <= 0:
                raise ValueError(raw)
            return value
        if kind is Path:
            return Path(raw)
        if kind is str:
            return raw
    except ValueError as exc:
        raise ConfigurationError(f"GATEWAY_{name.upper()}: expected {kind.__name__}, got {raw!r}") from exc
    raise TypeError(f"setting {name}: no reader for {kind!r}")  # a field of a new type: give it one above


# Every field's type, resolved from its annotation once (this module defers annotations).
TYPES: dict[str, Any] = {field.name: get_type_hints(Settings)[field.name] for field in fields(Settings)}


def user_model_dir(environ: Mapping[str, str]) -> Path:
    """The user's cache for model files: $XDG_CACHE_HOME (or ~/.cache)/governed-gateway/models."""
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "governed-gateway" / "models"


def _embeddings_key(settings: Settings) -> Settings:
    """The endpoint's key from GATEWAY_EMBEDDINGS_KEY_FILE (stripped), when that names the file;
    never both settings, and never the file's content in a message."""
    if settings.embeddings_key_file is None:
        return settings
    if settings.embeddings_key is not None:
        raise ConfigurationError("GATEWAY_EMBEDDINGS_KEY and GATEWAY_EMBEDDINGS_KEY_FILE: set one or the other, not both")
    try:
        key = Path(settings.embeddings_key_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not readable as UTF-8 text"
        raise ConfigurationError(f"GATEWAY_EMBEDDINGS_KEY_FILE: cannot read the key file ({reason})") from None
    if not key:
        raise ConfigurationError("GATEWAY_EMBEDDINGS_KEY_FILE: the key file is empty")
    return replace(settings, embeddings_key=key)


def load_settings(overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Build settings: defaults, then GATEWAY_* variables, then explicit overrides (flags win)."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, kind in TYPES.items():
        raw = environ.get(f"GATEWAY_{name.upper()}")
        if raw is not None and raw != "":
            values[name] = _convert(name, raw, kind)
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = value
    settings = replace(Settings(), **values)
    if settings.model_dir is None:
        settings = replace(settings, model_dir=user_model_dir(environ))
    settings.budget_shares  # noqa: B018  (validated once, here: a bad split stops start-up)
    settings.mcp_origins  # noqa: B018  (likewise a malformed origin)
    if settings.audit_key is not None and len(settings.audit_key.encode()) < 32:
        raise ConfigurationError("GATEWAY_AUDIT_KEY: use at least 32 bytes")
    if settings.audit_session_key is not None and len(settings.audit_session_key.encode()) < 32:
        raise ConfigurationError("GATEWAY_AUDIT_SESSION_KEY: use at least 32 bytes")
    if (settings.audit_signing_key is None) != (settings.audit_checkpoints is None):
        raise ConfigurationError(
            "GATEWAY_AUDIT_SIGNING_KEY and GATEWAY_AUDIT_CHECKPOINTS: set both (the key signs, the file keeps the checkpoints) or neither"
        )
    if not 0 < settings.admission_background_share <= 1:
        raise ConfigurationError("GATEWAY_ADMISSION_BACKGROUND_SHARE: a fraction of the seats above 0, at most 1 (such as 0.5)")
    if settings.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigurationError("GATEWAY_LOG_LEVEL: expected debug, info, warning or error")
    if settings.log_format not in ("text", "json"):
        raise ConfigurationError("GATEWAY_LOG_FORMAT: expected text or json")
    if settings.otel_exporter not in ("none", "otlp"):
        raise ConfigurationError("GATEWAY_OTEL_EXPORTER: expected none or otlp")
    if settings.audit_witness_url is not None and (
        not settings.audit_witness_url.startswith(("http://", "https://")) or settings.audit_signing_key is None
    ):
        raise ConfigurationError("GATEWAY_AUDIT_WITNESS_URL: an http:// or https:// URL, with GATEWAY_AUDIT_SIGNING_KEY set")
    if settings.decision_log_url is not None and not settings.decision_log_url.startswith(("http://", "https://")):
        raise ConfigurationError("GATEWAY_DECISION_LOG_URL: expected an http:// or https:// URL")
    if settings.public_url is not None:
        # No path, query or user (a password there would only be echoed back): the gateway serves at its root.
        if not PUBLIC_URL.fullmatch(settings.public_url) or not _port_in_range(settings.public_url):
            raise ConfigurationError(
                "GATEWAY_PUBLIC_URL: expected a scheme and host (and port) only, such as https://gateway.example.com"
            )
        settings = replace(settings, public_url=settings.public_url.rstrip("/"))
    if settings.embeddings not in ("bge-small", "minilm", "minilm-float", "none"):
        raise ConfigurationError("GATEWAY_EMBEDDINGS: expected bge-small, minilm, minilm-float or none")
    settings = _embeddings_key(settings)
    if settings.embeddings_batch > 2048 or settings.embeddings_concurrency > 64 or settings.embeddings_attempts > 10:
        raise ConfigurationError(
            "GATEWAY_EMBEDDINGS_BATCH (at most 2048), GATEWAY_EMBEDDINGS_CONCURRENCY (at most 64) and "
            "GATEWAY_EMBEDDINGS_ATTEMPTS (at most 10): one of them is out of range"
        )
    if settings.rerank not in ("vectors", "off"):
        raise ConfigurationError("GATEWAY_RERANK: expected vectors or off")
    if not settings.model_registry.startswith(("http://", "https://")):
        raise ConfigurationError("GATEWAY_MODEL_REGISTRY: expected an http:// or https:// URL")
    if settings.vector_index not in ("auto", "memory", "pgvector"):
        raise ConfigurationError("GATEWAY_VECTOR_INDEX: expected auto, memory or pgvector")
    if settings.pgvector_index not in ("hnsw", "ivfflat"):
        raise ConfigurationError("GATEWAY_PGVECTOR_INDEX: expected hnsw or ivfflat")
    if settings.lexical_engine not in ("auto", "tantivy", "store", "fts5"):
        raise ConfigurationError("GATEWAY_LEXICAL_ENGINE: expected auto, tantivy or store (fts5 is a name for store)")
    if settings.pii not in ("presidio", "none"):
        raise ConfigurationError("GATEWAY_PII: expected presidio or none")
    if settings.pii_processes is not None and settings.pii_processes > 64:
        raise ConfigurationError("GATEWAY_PII_PROCESSES: at most 64")
    if settings.jwt_secret is not None and len(settings.jwt_secret.encode()) < 32:
        raise ConfigurationError("GATEWAY_JWT_SECRET: use at least 32 bytes for HS256")
    if settings.jwt_public_key and not settings.jwt_public_key.lstrip().startswith("-----BEGIN"):
        key_path = Path(settings.jwt_public_key)
        if not key_path.is_file():
            raise ConfigurationError("GATEWAY_JWT_PUBLIC_KEY: neither a PEM key nor a readable file")
        settings = replace(settings, jwt_public_key=key_path.read_text())
    return settings
