"""Semantic connector on PostgreSQL's pgvector: an HNSW or IVFFlat index inside the store, searched
inside the policy pushdown, so a replica holds no vector state in memory.

Layout. `item_vector` (core/tables.py) stays the record of every embedding (float32 bytes, any
model). `item_pgvector` mirrors the rows of one dimension count as a `vector(dims)` column with one
vector index (cosine): HNSW by default, IVFFlat with `GATEWAY_PGVECTOR_INDEX=ivfflat` (below). A
trigger on `item_vector` writes the mirror row in the same statement, so every writer (the
embedding worker, `gateway embed`, another replica, a restore) keeps the two in one transaction
without knowing pgvector exists; a deleted item takes both rows with it (FK cascade). The mirror
carries the item's tenant, so the tenant condition is checked on the index's own heap row before
the item is joined, and a btree on (tenant, model) lets the planner read a small tenant exactly
instead of walking the shared index.

Search. Which plan is cheaper depends on the share of the tenant the caller may read, and the
planner cannot tell: it multiplies the selectivities of `permitted()`'s conjuncts and of the join
(`pk` and `content_hash` both equal, which it takes for independent), expects about one row, and
so always lists the rows the ACL admits and sorts them all. For a caller admitted to half a tenant
that is an exact search over half of it: 5,000 rows at 10,000 items (~35 ms), past the source's
deadline at 100,000. So the connector chooses, in at most three statements, every one with the
policy's `permitted()` condition, the caller's tags and the tenant inside it:

1. Exact over the admitted rows, if there are few: the rows `permitted()` admits are listed, at most
   `exact_up_to` + 1 of them, and the k nearest of those are returned with the count listed. Fewer
   than the cap listed means every admitted row was ranked: the answer is exact and final. This is
   the plan the planner picked on its own, bounded.
2. Otherwise (many admitted), the vector index with pgvector 0.8's iterative scan
   (`hnsw.iterative_scan` or `ivfflat.iterative_scan` = `relaxed_order`): the scan goes on past
   forbidden neighbours until k permitted rows are found or its budget is spent (HNSW's
   `max_scan_tuples`; IVFFlat's `max_probes` lists). pgvector's README answers a planner
   that will not pick the index with a planner setting for the one transaction (its example is
   `SET LOCAL enable_seqscan = off`); the plan this one picks instead reads btrees and sorts, so
   here `enable_sort` is off for that statement: no plan but the index's own order can then serve
   ORDER BY distance, and the index is used.
3. When that comes back short, the statement runs once more with the order by an expression the
   index cannot serve: an exact search over every permitted row, so k permitted results come back
   whenever k exist.

HNSW or IVFFlat. An HNSW graph's links do not lead through a crowd of near-duplicates (versions,
quoted threads, one text stored many times): at a million items of ~193 near-copies each
(bench/scale_bench.py), the 50% caller's recall@10 through pgvector's graph was 0.647. An inverted
file holds such a crowd in a list or two and reads the lists nearest the query whole, scoring every
row exactly. IVFFlat's lists are k-means cells made at build from the rows then present (`lists`
about rows / 256: the in-process cells, connectors/sql/cells.py, measured at a million with 8
probed: ~256 rows a cell 0.975-0.981, ~980 rows a cell 0.924; pgvector's README suggests rows / 1000
up to a million and sqrt(rows) past it, with sqrt(lists) probes, which reads ~32,000 rows a search
at a million against ~2,000 here). The search probes IVFFLAT_PROBES lists, and the iterative scan
goes on, IVFFLAT_PROBES lists at a time, up to IVFFLAT_MAX_PROBES. The costs: the build's k-means (one
process, on a sample of 50 rows a list) needs `maintenance_work_mem` for the sample and 50 x
lists^2 x 4 bytes of bounds (~3.4 GB at a million rows, ~62 MB at 100,000; pgvector refuses a
smaller one, and start-up says so), and the lists are fixed at build:
rows written later are filed under the nearest list, which grows. A store that grows far past its
build (one first started empty has one list) should be re-indexed: drop the index
(`DROP INDEX ix_item_pgvector_ivfflat`) and restart, and `prepare` builds it again with lists for
the rows now (`REINDEX` re-trains the centroids but keeps the number of lists). `prepare` says at
every start how many rows the lists were made for and how many the mirror holds, as a warning once
it holds IVFFLAT_REINDEX_PAST times as many.

A filter found to admit many rows is remembered for a minute (per process, keyed by the filter's
values but not its instant), so its next searches go straight to the index; that memory only
chooses the plan, never what may be returned.

The DDL is plain SQL in functions (`ddl`, `backfill_sql`, `index_sql`) so that a migration can run
the same statements; `prepare` runs them on demand at start-up, under an advisory lock (replicas
starting together), with IF NOT EXISTS throughout, and keeps exactly one vector index: building the
one chosen drops the other, in the same transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, Column, Float, ForeignKey, MetaData, String, Table, and_, bindparam, cast, func, select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.types import UserDefinedType

from connectors.sql.cancel import cancellable, watched
from connectors.sql.pushdown import RECORD_COLUMNS, bound, item, permitted, record_from_row, tagged, value
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.records import Candidate, RecallQuery, SkipReason, SourceResult

log = logging.getLogger("gateway.connectors.pgvector")

TABLE = "item_pgvector"
INDEXES = ("hnsw", "ivfflat")  # GATEWAY_PGVECTOR_INDEX
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64
# IVFFlat: rows a list at build (in-process at a million, 8 cells probed: ~256 rows a cell 0.975-0.981
# recall@10 for a 50% caller among near-copies, ~980 rows 0.924); lists probed a search (the same
# measurement: 4 / 8 / 16 probed 0.953 / 0.975 / 0.997, ~1,800 / 3,600 / 7,100 rows scored; pgvector's
# IVFFlat at 100,000 bench items, 4 / 8 / 16 / 64: 0.870 / 0.947 / 0.967 / 1.000, 16 costing ~2 ms more
# than 8 at the connector), and at most, with the iterative scan: 80 lists of ~256 rows, the ~20,000
# rows of HNSW's max_scan_tuples.
IVFFLAT_ROWS_PER_LIST = 256
IVFFLAT_PROBES = 16
IVFFLAT_MAX_PROBES = 80
IVFFLAT_MAX_LISTS = 32_768  # pgvector's
IVFFLAT_REINDEX_PAST = 4  # a mirror holding this many times the rows its lists were made for is worth re-indexing
LOCK_KEY = 0x6777_7067_7663  # pg_advisory_xact_lock key: one replica creates the objects at a time
MAX_DIMS = 2000  # pgvector's HNSW limit for `vector`
# Admitted rows ranked exactly; more: the HNSW index. At 1,000,000 items (limit 50, busy 2-core machine,
# p50/p95 ms): 10,000 admitted exact 121/161 against the index's 244/319 (its walk reads ~20,000
# pages past shared_buffers: I/O-bound; the exact plan is CPU-bound, all pages hit); 15,000: 165/244
# against 214/394; 20,000: 222/339 against 128/184. At 100,000 exact is cheaper up to 20,000 (124
# against 256). A filter admitting more pays this listing on its first search a minute.
EXACT_UP_TO = 10_000
WIDE_FOR_S = 60.0  # how long a filter found to admit many rows goes straight to the index
WIDE_FILTERS = 1024  # how many such filters a connector remembers


class Vector(UserDefinedType[Any]):
    """pgvector's `vector` type; values are bound as its text form '[x,y,...]' and cast."""

    cache_ok = True

    def get_col_spec(self, **_: Any) -> str:
        return "vector"


mirror = Table(
    TABLE,
    MetaData(),  # not the store's metadata: SQLite stores never get this table
    Column("item_pk", BigInteger, ForeignKey("item_vector.item_pk", ondelete="CASCADE"), primary_key=True),
    Column("tenant", String(200), nullable=False),
    Column("model", String(200), nullable=False),
    Column("content_hash", String(64), nullable=False),
    Column("embedding", Vector(), nullable=False),
)


def ddl(dims: int) -> list[str]:
    """The statements that create the mirror for `dims`-dimensional vectors, idempotently (the
    extension itself is created separately: it may need more privilege than the rest)."""
    dims = _checked(dims)
    return [
        # float32 little-endian bytes (item_vector.vector) -> vector, in SQL: IEEE 754 by hand,
        # since PostgreSQL has no bytea -> float4 cast. Normal and subnormal numbers; a NaN or an
        # infinity (exponent 255) fails the write, as pgvector rejects them anyway.
        """
        CREATE OR REPLACE FUNCTION gw_float4le_to_vector(b bytea, dims integer) RETURNS vector
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
          SELECT array_agg(
            (CASE WHEN s = 1 THEN -1.0::float8 ELSE 1.0::float8 END)
            * (CASE WHEN e = 0 THEN m::float8 * 2.0::float8 ^ (-149)
                    WHEN e = 255 THEN 'NaN'::float8
                    ELSE (8388608 + m)::float8 * 2.0::float8 ^ (e - 150) END)
            ORDER BY i)::real[]::vector
          FROM (
            SELECT i,
                   get_byte(b, 4 * i + 3) >> 7 AS s,
                   ((get_byte(b, 4 * i + 3) & 127) << 1) | (get_byte(b, 4 * i + 2) >> 7) AS e,
                   ((get_byte(b, 4 * i + 2) & 127) << 16) | (get_byte(b, 4 * i + 1) << 8) | get_byte(b, 4 * i) AS m
            FROM generate_series(0, dims - 1) AS i
          ) AS parts
        $$
        """,
        f"""
        CREATE TABLE IF NOT EXISTS {TABLE} (
          item_pk bigint PRIMARY KEY REFERENCES item_vector (item_pk) ON DELETE CASCADE,
          tenant varchar(200) NOT NULL,
          model varchar(200) NOT NULL,
          content_hash varchar(64) NOT NULL,
          embedding vector({dims}) NOT NULL
        )
        """,
        # The mirror follows item_vector in the writer's own statement (same transaction). Rows of
        # another dimension count have no place in the column: their mirror row is removed.
        f"""
        CREATE OR REPLACE FUNCTION gw_item_pgvector_sync() RETURNS trigger
        LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
        BEGIN
          IF NEW.dims <> {dims} OR length(NEW.vector) <> 4 * {dims} THEN
            DELETE FROM {TABLE} WHERE item_pk = NEW.item_pk;
            RETURN NULL;
          END IF;
          INSERT INTO {TABLE} (item_pk, tenant, model, content_hash, embedding)
          SELECT NEW.item_pk, i.tenant, NEW.model, NEW.content_hash, gw_float4le_to_vector(NEW.vector, {dims})
          FROM item AS i WHERE i.pk = NEW.item_pk
          ON CONFLICT (item_pk) DO UPDATE
            SET tenant = EXCLUDED.tenant, model = EXCLUDED.model,
                content_hash = EXCLUDED.content_hash, embedding = EXCLUDED.embedding;
          RETURN NULL;
        END
        $$
        """,
        "DROP TRIGGER IF EXISTS gw_item_pgvector_sync ON item_vector",
        "CREATE TRIGGER gw_item_pgvector_sync AFTER INSERT OR UPDATE ON item_vector "
        "FOR EACH ROW EXECUTE FUNCTION gw_item_pgvector_sync()",
        f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_tenant ON {TABLE} (tenant, model)",
    ]


def backfill_sql(dims: int) -> str:
    """Mirror the rows written before the mirror existed (run once, before the HNSW index is built)."""
    dims = _checked(dims)
    return f"""
        INSERT INTO {TABLE} (item_pk, tenant, model, content_hash, embedding)
        SELECT v.item_pk, i.tenant, v.model, v.content_hash, gw_float4le_to_vector(v.vector, {dims})
        FROM item_vector AS v JOIN item AS i ON i.pk = v.item_pk
        WHERE v.dims = {dims} AND length(v.vector) = 4 * {dims}
        ON CONFLICT (item_pk) DO NOTHING
    """


def index_name(kind: str) -> str:
    """The name of the mirror's vector index of `kind` (hnsw or ivfflat): each has its own."""
    if kind not in INDEXES:
        raise ValueError(f"pgvector: the index is one of {', '.join(INDEXES)}, got {kind!r}")
    return f"ix_{TABLE}_{kind}"


def lists_for(rows: int) -> int:
    """IVFFlat's lists for a mirror of `rows` rows: about IVFFLAT_ROWS_PER_LIST rows a list, at least one."""
    return max(1, min(IVFFLAT_MAX_LISTS, rows // IVFFLAT_ROWS_PER_LIST))


def index_sql(kind: str = "hnsw", rows: int = 0) -> str:
    """The vector index over the mirror (cosine distance): HNSW, or IVFFlat with lists for `rows` rows."""
    name = index_name(kind)
    if kind == "ivfflat":
        return (
            f"CREATE INDEX IF NOT EXISTS {name} ON {TABLE} USING ivfflat (embedding vector_cosine_ops) "
            f"WITH (lists = {lists_for(rows)})"
        )
    return (
        f"CREATE INDEX IF NOT EXISTS {name} ON {TABLE} USING hnsw (embedding vector_cosine_ops) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
    )


def _checked(dims: int) -> int:
    if not isinstance(dims, int) or not 0 < dims <= MAX_DIMS:
        raise ValueError(f"pgvector: dims must be an integer in 1..{MAX_DIMS}, got {dims!r}")
    return dims


def prepare(engine: Engine, dims: int, index: str = "hnsw") -> str | None:
    """Make the mirror ready for `dims` with the vector index `index` (hnsw or ivfflat) and no other;
    None when it is, else why pgvector cannot serve this store. Never raises for an unusable store:
    `auto` falls back to the in-process index on the reason."""
    wanted, other = index_name(index), index_name("ivfflat" if index == "hnsw" else "hnsw")
    if engine.dialect.name != "postgresql":
        return "the store is not PostgreSQL"
    try:
        with engine.begin() as conn:
            if not conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).first():
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))  # may need privilege
            if conn.execute(text("SELECT to_regtype('vector')")).scalar() is None:
                return "the vector extension is installed in a schema outside the search_path"
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
            found = conn.execute(
                text(
                    "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                    "WHERE a.attrelid = to_regclass(:table) AND a.attname = 'embedding' AND NOT a.attisdropped"
                ),
                {"table": TABLE},
            ).scalar()
            if found is not None and found != f"vector({dims})":
                return f"{TABLE}.embedding is {found}, the embedding model makes vector({dims}); drop the table to rebuild it"
            ready = (
                found is not None
                and conn.execute(
                    text(
                        "SELECT to_regclass(:wanted) IS NOT NULL AND to_regclass(:other) IS NULL AND EXISTS "
                        "(SELECT 1 FROM pg_trigger WHERE tgname = 'gw_item_pgvector_sync' AND tgrelid = to_regclass('item_vector'))"
                    ),
                    {"wanted": wanted, "other": other},
                ).scalar()
            )
            if not ready:
                for statement in ddl(dims):
                    conn.execute(text(statement))
                if found is None:
                    conn.execute(text(backfill_sql(dims)))
                rows = 0
                if index == "ivfflat":  # its lists are made from the rows there now
                    rows = int(conn.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar() or 0)
                started = time.perf_counter()
                conn.execute(text(index_sql(index, rows)))
                conn.execute(text(f"DROP INDEX IF EXISTS {other}"))  # exactly one vector index serves
                if index == "ivfflat":
                    log.info(
                        "pgvector: IVFFlat index built with %d lists for %d rows in %.1f s",
                        lists_for(rows),
                        rows,
                        time.perf_counter() - started,
                    )
                if found is None:  # the planner's first plans need the mirror's size, not a guess of one row
                    conn.execute(text(f"ANALYZE {TABLE}"))
            elif index == "ivfflat":
                _report_lists(conn)
            # else a replica restarting: take no lock on item_vector, change nothing
    except SQLAlchemyError as exc:
        message = str(exc.orig if hasattr(exc, "orig") else exc).splitlines()[0]
        hint = (
            "; give the gateway's role more (ALTER ROLE ... SET maintenance_work_mem = '4GB', or "
            "options=-cmaintenance_work_mem%3D4GB in GATEWAY_DATABASE_URL) or use GATEWAY_PGVECTOR_INDEX=hnsw"
            if "maintenance_work_mem" in message
            else ""
        )
        return f"pgvector is not available ({type(exc).__name__}: {message}){hint}"
    _analyze_if_never(engine)
    return None


def _report_lists(conn: Connection) -> None:
    """Say how many rows the IVFFlat index's lists were made for against the rows the mirror holds
    now (its statistics' estimate): a warning, with how to re-index, once it holds
    IVFFLAT_REINDEX_PAST times as many and more than the exact plan ranks alone."""
    row = conn.execute(
        text(
            "SELECT (SELECT option_value::int FROM pg_options_to_table(i.reloptions) WHERE option_name = 'lists'), "
            "(SELECT reltuples FROM pg_class WHERE oid = to_regclass(:table)) FROM pg_class i WHERE i.oid = to_regclass(:index)"
        ),
        {"table": TABLE, "index": index_name("ivfflat")},
    ).first()
    if row is None or row[0] is None or row[1] is None or row[1] < 0:
        return
    lists, rows = int(row[0]), int(row[1])
    made_for = lists * IVFFLAT_ROWS_PER_LIST
    if rows > max(IVFFLAT_REINDEX_PAST * made_for, EXACT_UP_TO):
        log.warning(
            "pgvector: the IVFFlat index's %d lists were made for about %d rows; the mirror holds about %d "
            "(%d a list), so its searches read more rows and rank fewer of the nearest: DROP INDEX %s and restart "
            "to rebuild it with lists for the rows now (REINDEX keeps its lists)",
            lists,
            made_for,
            rows,
            rows // lists,
            index_name("ivfflat"),
        )
    else:
        log.info(
            "pgvector: IVFFlat index with %d lists (made for about %d rows); the mirror holds about %d", lists, made_for, rows
        )


# The tables a search's plan is chosen over (the mirror is analyzed when it is made).
PLANNED = ("item", "item_principal", "item_tag", "item_scope")


def _analyze_if_never(engine: Engine) -> None:
    """ANALYZE the tables a search reads that have never been analyzed (a store loaded just before
    start-up, before autovacuum came by). Without their statistics the planner expects one item
    and one ACL row a principal, and the count of a caller's admitted rows read the ACL rows of
    its principals once for every item (0.44 s for a caller admitted to half of 1,000 items).
    Best effort: a role that may not analyze them, or any other failure, leaves it to autovacuum."""
    try:
        with engine.begin() as conn:
            oids = ", ".join(f"to_regclass('{table}')" for table in PLANNED)
            never = conn.execute(text(f"SELECT relname FROM pg_class WHERE oid IN ({oids}) AND reltuples < 0")).scalars().all()
            for table in PLANNED:
                if table in never:
                    conn.execute(text(f"ANALYZE {table}"))
    except SQLAlchemyError as exc:
        log.warning("pgvector: could not analyze the tables searches are planned over (%s)", type(exc).__name__)


def literal(vector: Sequence[float]) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class PgvectorConnector:
    """The semantic connector on pgvector: the search is one SQL statement inside the pushdown."""

    name = "semantic"

    def __init__(
        self,
        engine: Engine,
        model: str,
        dims: int,
        ef_search: int = 100,
        max_scan_tuples: int = 20_000,
        exact_up_to: int = EXACT_UP_TO,
        index: str = "hnsw",
        probes: int = IVFFLAT_PROBES,
        max_probes: int = IVFFLAT_MAX_PROBES,
    ) -> None:
        self.engine = engine
        self.model = model
        self.dims = _checked(dims)
        index_name(index)  # refuses a kind pgvector's mirror has no index of
        self.index = index  # the one `prepare` built (GATEWAY_PGVECTOR_INDEX)
        self.ef_search = ef_search
        self.max_scan_tuples = max_scan_tuples
        self.probes = probes
        self.max_probes = max_probes
        self.exact_up_to = exact_up_to
        self._wide: OrderedDict[tuple[Any, ...], float] = OrderedDict()  # filter -> when it was seen to admit many
        self._wide_lock = threading.Lock()

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        started = time.perf_counter()
        if query.vector is None:
            return SourceResult.skipped(self.name, SkipReason.NO_QUERY_VECTOR)
        if query.model != self.model or len(query.vector) != self.dims:
            raise ConnectorError("query vector is of another model than the index")
        candidates, strategy = await cancellable(self._search, where, query)
        ms = (time.perf_counter() - started) * 1000
        return SourceResult(self.name, "ok" if candidates else "empty", candidates, ms, detail=f"{strategy} search")

    def _statement(self, tags: tuple[str, ...], limit: int, *, exact: bool) -> Any:
        probe = cast(bindparam("pgv_query"), Vector())
        distance = mirror.c.embedding.op("<=>", return_type=Float())(probe)
        joined = mirror.join(item, and_(item.c.pk == mirror.c.item_pk, item.c.content_hash == mirror.c.content_hash))
        # `+ 0` is the same order the vector index cannot serve: the planner then reads the permitted
        # rows through the btrees and sorts them, an exact search.
        order = (distance + 0) if exact else distance
        return (
            select(*RECORD_COLUMNS, distance.label("pgv_distance"))
            .select_from(joined)
            .where(mirror.c.tenant == value("tenant"), mirror.c.model == bindparam("pgv_model"), permitted(), tagged(tags))
            .order_by(order)
            .limit(limit)
        )

    def _admitted_statement(self, tags: tuple[str, ...], limit: int) -> Any:
        """Exact over the admitted rows, at most `pgv_cap` of them: the rows `permitted()` and the
        tags admit are listed first (a LIMIT the planner cannot lift), each with how many were
        listed (`pgv_admitted`) and its distance, read from the mirror by its own pk and content
        hash; the k nearest come back, an admitted row without a current vector of this model
        after every row with one (so the count comes back even when none has one). The item's
        columns are read for those k only. Joins would not do here: the planner takes `pk` and
        `content_hash` equal for independent conditions, expects about one row, and read the
        whole mirror (merge join, or once per admitted row) instead of looking each row up."""
        listed = (
            select(item.c.pk, item.c.content_hash)
            .where(permitted(), tagged(tags))
            .limit(bindparam("pgv_cap"))
            .subquery("pgv_listed")
        )
        probe = cast(bindparam("pgv_query"), Vector())
        distance = (
            select(mirror.c.embedding.op("<=>", return_type=Float())(probe))
            .where(
                mirror.c.item_pk == listed.c.pk,
                mirror.c.content_hash == listed.c.content_hash,
                mirror.c.tenant == value("tenant"),
                mirror.c.model == bindparam("pgv_model"),
            )
            .scalar_subquery()
        )
        ranked = distance.label("distance")
        nearest = (
            select(listed.c.pk, ranked, func.count().over().label("admitted"))
            .order_by(ranked.asc().nulls_last())
            .limit(limit)
            .subquery("pgv_nearest")
        )
        return select(
            *RECORD_COLUMNS, nearest.c.distance.label("pgv_distance"), nearest.c.admitted.label("pgv_admitted")
        ).select_from(nearest.join(item, item.c.pk == nearest.c.pk))

    def _search(self, where: ItemFilter, query: RecallQuery) -> tuple[tuple[Candidate, ...], str]:
        assert query.vector is not None
        limit = max(1, query.limit)
        cap = max(self.exact_up_to, limit) + 1
        parameters = {**bound(where), "pgv_query": literal(query.vector), "pgv_model": self.model, "pgv_cap": cap}
        key = self._key(where, query.tags)
        try:
            with watched(self.engine) as conn, conn.begin():
                self._tune(conn, limit)
                rows: Sequence[Any] | None = None
                strategy = "exact"
                if not self._seen_wide(key):
                    listed = conn.execute(self._admitted_statement(query.tags, limit), parameters).all()
                    if not listed or int(listed[0]._mapping["pgv_admitted"]) < cap:  # every admitted row was ranked
                        rows = [row for row in listed if row._mapping["pgv_distance"] is not None]
                    else:
                        self._remember_wide(key)
                if rows is None:  # many admitted: the vector index, with no sort the planner could pick instead
                    conn.execute(text("SELECT set_config('enable_sort', 'off', true)"))
                    rows = conn.execute(self._statement(query.tags, limit, exact=False), parameters).all()
                    strategy = f"{self.index} iterative"
                    if len(rows) < limit:  # the scan gave up (or fewer exist): exact over the permitted rows
                        self._forget_wide(key)
                        conn.execute(text("SELECT set_config('enable_sort', 'on', true)"))
                        rows = conn.execute(self._statement(query.tags, limit, exact=True), parameters).all()
                        strategy = "exact"
        except SQLAlchemyError as exc:
            raise ConnectorError(f"semantic search failed: {type(exc).__name__}") from exc
        # relaxed_order may return neighbours slightly out of order: order them by their distance.
        ranked = sorted(rows, key=lambda row: float(row._mapping["pgv_distance"]))
        return tuple(
            Candidate(record_from_row(row), self.name, rank, 1.0 - float(row._mapping["pgv_distance"]))
            for rank, row in enumerate(ranked, start=1)
        ), strategy

    def _tune(self, conn: Connection, limit: int) -> None:
        """pgvector 0.8's iterative scan, for this transaction only (SET LOCAL); and no sequential
        scans: every statement here reads rows by key (the ACL's, the item's, the index's), and a
        store whose statistics are not yet gathered (just loaded, before autovacuum's ANALYZE) had
        the planner, expecting one item, read all of `item_principal` for each item instead: 260 ms
        for a caller admitted to one item of 1,000. And a custom plan for every execution: psycopg
        prepares a statement run 5 times on a connection, and PostgreSQL then switched to a
        generic plan after 5 more, one made without the query vector's and the caller's values:
        from the 11th search on a connection every search of the 50% caller at 100,000 items took
        2.6-3.8 s instead of 13-34 ms, through either index. IVFFlat: `probes` lists read whole
        and ranked exactly, then `probes` more at a time while fewer than k permitted rows are
        found, up to `max_probes` (pgvector uses `probes` when that is the larger)."""
        if self.index == "ivfflat":
            conn.execute(
                text(
                    "SELECT set_config('ivfflat.iterative_scan', 'relaxed_order', true), "
                    "set_config('ivfflat.probes', :probes, true), set_config('ivfflat.max_probes', :max_probes, true), "
                    "set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true)"
                ),
                {"probes": str(int(self.probes)), "max_probes": str(int(self.max_probes))},
            )
            return
        ef_search = min(1000, max(self.ef_search, 2 * limit))
        conn.execute(  # one round trip: set_config(..., true) is SET LOCAL
            text(
                "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                "set_config('hnsw.ef_search', :ef_search, true), set_config('hnsw.max_scan_tuples', :max_scan_tuples, true), "
                "set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true)"
            ),
            {"ef_search": str(int(ef_search)), "max_scan_tuples": str(int(self.max_scan_tuples))},
        )

    # A filter that admits many rows, remembered so that its next searches skip the count. Only the
    # choice of plan depends on it: each plan applies the whole filter itself.

    @staticmethod
    def _key(where: ItemFilter, tags: tuple[str, ...]) -> tuple[Any, ...]:
        return (
            where.tenant,
            where.principals,
            where.sensitivities,
            where.scopes,
            where.kinds,
            where.statuses,
            where.history,
            where.subjects,
            tags,
        )

    def _seen_wide(self, key: tuple[Any, ...]) -> bool:
        with self._wide_lock:
            seen = self._wide.get(key)
            if seen is None:
                return False
            if time.monotonic() - seen > WIDE_FOR_S:
                del self._wide[key]
                return False
            return True

    def _remember_wide(self, key: tuple[Any, ...]) -> None:
        with self._wide_lock:
            self._wide[key] = time.monotonic()
            self._wide.move_to_end(key)
            while len(self._wide) > WIDE_FILTERS:
                self._wide.popitem(last=False)

    def _forget_wide(self, key: tuple[Any, ...]) -> None:
        with self._wide_lock:
            self._wide.pop(key, None)
