"""Request and reply bodies of the HTTP API (pydantic models; they are the OpenAPI contract)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
TYPE_PATTERN = r"^[A-Za-z]+( *\( *[0-9]+ *\))?$"


class Attr(BaseModel):
    name: str = Field(pattern=NAME_PATTERN, max_length=128, examples=["price"])
    type: str = Field(
        pattern=TYPE_PATTERN,
        max_length=32,
        examples=["integer", "float", "char(8)"],
        description="integer, float, byte, char(n), varchar(n), string, boolean, timestamp",
    )


class SourceOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    unit: Literal["millisecond", "second", "minute", "hour", "day"] | None = Field(
        None, description="time unit of the timestamps (default second)"
    )
    slack: int | None = Field(None, ge=0, le=1 << 40, description="streams: out-of-order slack in time units")
    timestamp: Literal["application", "system"] | None = Field(
        None, description="streams: 'system' = the server stamps arrivals with its clock"
    )


class SourceIn(BaseModel):
    """A stream or relation as a JSON schema (alternative to DDL text)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN, max_length=128, examples=["Orders"])
    kind: Literal["stream", "relation"] = "stream"
    attrs: list[Attr] = Field(min_length=1, max_length=1000)
    options: SourceOptions | None = None
    static: bool = False
    keys: list[list[str]] = Field(default_factory=list, description="candidate keys (column lists)")
    constraints: list[str] = Field(
        default_factory=list,
        max_length=100,
        description="streams: k-constraints in DDL form, e.g. 'clustered(item, 10)', 'item references Items(id) "
        "within 100' (docs/k-constraints.md)",
    )


class DdlIn(BaseModel):
    """DDL text: `register stream S (A int, B float) with (slack = 2)`."""

    model_config = ConfigDict(extra="forbid")
    ddl: str = Field(min_length=1, max_length=1 << 20)


class AttrOut(BaseModel):
    name: str
    type: str


class SourceOut(BaseModel):
    name: str
    kind: Literal["stream", "relation"]
    attrs: list[AttrOut]
    time_unit: str
    slack: int
    timestamp: Literal["application", "system"]
    static: bool
    keys: list[list[str]]
    constraints: list[str] = Field(default_factory=list, description="declared k-constraints")
    accepted: int = Field(description="tuples accepted so far")
    max_ts: int | None = Field(None, description="largest timestamp (or heartbeat) seen")


class PushResult(BaseModel):
    source: str
    accepted: int = Field(
        description="tuples accepted by this push (the whole push, or an error), not counting late ones"
    )
    late: int = Field(
        0,
        description="tuples of the push dropped as late (not in `accepted`): later than the stream's slack, or "
        "(with `late=drop`) older than the source's time",
    )
    refused: int = Field(
        0,
        description="tuples of the push (counted in `accepted`) that admission control refused under overload: "
        "admitting them would have put the engine's queue memory over its limit (docs/approximation.md)",
    )
    replayed: bool = Field(
        False,
        description="true: this push's Idempotency-Key was applied before; nothing was done and this is "
        "that push's reply",
    )


class HeartbeatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ts: int = Field(ge=-(1 << 62), le=1 << 62, description="time reached ts: no element with a smaller ts will come")


class HeartbeatOut(BaseModel):
    source: str
    ts: int


class QueryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cql: str = Field(min_length=1, max_length=1 << 20, examples=["select * from S where A > 10"])
    name: str | None = Field(None, pattern=NAME_PATTERN, max_length=128)
    seed_from: int | None = Field(
        None,
        ge=-(1 << 62),
        le=1 << 62,
        description="register the query as if at this earlier instant: its state is built from the log archive "
        "(the server needs --data-dir and --retain-log) by replaying the input from this instant on, its "
        "results from then on are retained for `from=` resumes, then it runs live",
    )
    approximate: str | dict[str, str | float] | None = Field(
        None,
        description="`static` approves static approximation within the query's TOLERATE clauses; an object "
        "`{mode, window_fraction, sample_percent}` adds query-wide tolerances (docs/approximation.md); "
        "default `exact`",
    )


class MemoryVerdict(BaseModel):
    """A query's bounded-memory verdict in full (engine/boundedness.py `Verdict`)."""

    bounded: bool | None
    procedure: Literal["characterization", "plan"] = Field(
        description="`characterization`: decided by the bounded-memory characterization of streaming "
        "select-project-join-aggregate queries; `plan`: by the state this engine's plan operators hold"
    )
    rule: str = Field(description="the theorem / condition that decided, e.g. `Theorem 5.10, C3`")
    reason: str = Field(description="why, naming the attribute or predicate that decided")
    synopsis: list[str] = Field(default_factory=list, description="what a bounded query's synopsis keeps")
    memory_units: int | None = Field(None, description="its bound, one unit per value or count kept")
    engine_plan: str = Field("", description="what this engine's own plan holds (it may hold more)")


class QueryOut(BaseModel):
    id: int
    name: str | None
    cql: str
    kind: Literal["stream", "relation"]
    schema_: list[AttrOut] = Field(alias="schema", serialization_alias="schema")
    explain: str
    complete_from: int | None = Field(
        None,
        description="instant from which the results are exact (null: from "
        "the start, or never when `complete` is false); a query registered while "
        "data flows starts from the shared plan's current state",
    )
    complete: bool = Field(
        True,
        description="false when the query started late over a window needing history "
        "it cannot have: its results reflect only the data since registration",
    )
    active: bool = True
    state: Literal["active", "inactive", "suspended"] = Field(
        "active", description="`suspended`: the engine released it for passing its memory limit (see `suspended`)"
    )
    suspended: str | None = Field(None, description="why the engine suspended it; null unless suspended")
    memory_limit: int | None = Field(None, description="bytes of state it may hold (its knob, else the server's)")
    cpu_limit: float | None = Field(
        None, description="engine seconds it may take in one run (its knob, else the server's)"
    )
    weight: float = 1.0
    approximation: dict[str, Any] | None = Field(
        None,
        description="the overload controller's approximation in force (docs/approximation.md): "
        '`{"sampling_rate": 0.4, "since": <clock second>, "reason": "...", "refused_rows": 120}` '
        "(`refused_rows`: rows of the sources it reads that admission control refused under overload; "
        "`since` is null once the query is exact again but rows were refused); null: exact results, "
        "nothing refused",
    )
    bounded_memory: bool | None = Field(
        None,
        description="bounded-memory verdict (docs/bounded-memory.md): true = answerable in memory bounded "
        "whatever the input, null = bounded if the arrival rate is (time-based windows), false = memory grows "
        "with the input",
    )
    bounded_memory_note: str = Field("", description="why, and the rule that decided, in one line")
    bounded_memory_verdict: MemoryVerdict | None = Field(
        None, description="the verdict in full: procedure, rule, reason, synopsis of a bounded query"
    )
    partitioning: dict[str, Any] | None = Field(
        None,
        description="the key on which all the query's state partitions (`key`, each source's key columns in "
        "`sources`; `any`: no keyed state) or why none (`reason`, and the partitionable `prefix` and global "
        "`tail` where that applies): what `cqlstream spark-run` can distribute",
    )
    subscribers: int = 0
    summaries: list[dict[str, Any]] = Field(
        default_factory=list,
        description="operators of the query running on a summary instead of exact state (docs/approximation.md, "
        "Summary synopses): entity `operator`, `kind`, `summary` mode, `state`, the estimated error "
        "(`fp_rate`, `est_wrong_rows` and `wrong_kind`, or `sample_fraction`) and the `bound` the results keep; "
        "empty when all state is exact",
    )
    static_approximation: dict[str, Any] | None = Field(
        None,
        description="with `approximate` at registration: the approved spec, the static rewrites in force "
        "(`applied`: rule, operator before and after, why) and the tolerated ones refused (`refused`: rule, "
        "operator, the reason naming the operator that forbids it); null for an exact query",
    )

    model_config = ConfigDict(populate_by_name=True)


class QueryPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    active: bool | None = None
    weight: float | None = Field(None, gt=0, le=1e9)
    memory_limit: int | None = Field(
        None, ge=0, le=1 << 62, description="bytes of state it may hold before it is suspended; null: the server's"
    )


class ViewIn(BaseModel):
    """Either the whole statement (`cql`: `register view V as select …`) or `name` + `query`."""

    model_config = ConfigDict(extra="forbid")
    cql: str | None = Field(None, min_length=1, max_length=1 << 20)
    name: str | None = Field(None, pattern=NAME_PATTERN, max_length=128)
    query: str | None = Field(None, min_length=1, max_length=1 << 20)


class ViewOut(BaseModel):
    name: str
    kind: Literal["stream", "relation"]
    schema_: list[AttrOut] = Field(alias="schema", serialization_alias="schema")
    model_config = ConfigDict(populate_by_name=True)


class Entity(BaseModel):
    """A control table (STREAM §6.1): live counters and settable knobs of one plan entity."""

    model_config = ConfigDict(extra="allow")
    id: str
    kind: str
    name: str | None = None
    counters: dict[str, Any] = Field(default_factory=dict)
    knobs: dict[str, Any] = Field(default_factory=dict)
    queries: list[int] = Field(default_factory=list)


class PlanEdge(BaseModel):
    """A queue of the global plan, from the entity writing it to one reading it."""

    model_config = ConfigDict(populate_by_name=True)
    queue: str | None = Field(
        description="the queue's entity id (`q:N`); null for a feed from outside the plan (a Spark source into its stream)"
    )
    from_: str = Field(
        alias="from", serialization_alias="from", description="producer: `op:N`, `src:NAME` or `spark:NAME`"
    )
    to: str = Field(description="consumer: `op:N`, `syn:N` (a store) or `query:N` (a query's results)")
    queries: list[int] = Field(default_factory=list, description="queries using the queue")


class PlanGraph(BaseModel):
    """The global plan of every registered query (`Dsms.explain_plan("json")`): nodes are the control
    tables of operators, stores, sources and queries; edges are the queues between them."""

    nodes: list[Entity]
    edges: list[PlanEdge]


class PeekTuple(BaseModel):
    ts: int
    sign: int = Field(description="1 insert, -1 delete")
    row: list[Any]


class Peek(BaseModel):
    """The last tuples that entered a queue or source, a window's or store's current contents, or
    the last tuples an operator produced (`Dsms.peek`)."""

    id: str = Field(description="the entity peeked at (a source is peeked at through its queue)")
    what: str = Field(description="what the tuples are, e.g. `recent tuples entering the queue`")
    tuples: list[PeekTuple]


class EntityPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    knobs: dict[str, Any] = Field(description="knob name → new value")


class Health(BaseModel):
    status: Literal["ok"]
    streams: int
    queries: int
    subscribers: int
    uptime_seconds: float
    persistence: bool


class SparkSourceIn(BaseModel):
    """A Spark source: which stream it feeds and how Spark reads it (the one-line form
    `STREAM=FORMAT[:PATH][?key=value&...]` may be posted as text/plain instead)."""

    model_config = ConfigDict(extra="forbid")
    stream: str = Field(pattern=NAME_PATTERN, max_length=128, examples=["Orders"])
    format: str = Field(
        min_length=1,
        max_length=128,
        examples=["csv"],
        description="csv, json, parquet, socket, rate, rate-micro-batch, or any Spark data source's short name",
    )
    path: str | None = Field(None, max_length=4096, examples=["/data/orders"], description="what the format reads")
    options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Spark reader options", examples=[{"maxFilesPerTrigger": 1}]
    )
    columns: dict[str, str] = Field(
        default_factory=dict, description="field -> the Spark column feeding it, where the names differ"
    )
    time_column: str = Field("ts", max_length=128, description="the column of event time (integer ticks or TIMESTAMP)")
    watermark_delay: int = Field(
        0, ge=0, le=1 << 40, description="ticks the stream's time trails the largest event time"
    )
    schema_: str | None = Field(
        None,
        alias="schema",
        max_length=65536,
        description="the Spark schema (DDL) for files; default: made from the stream",
    )
    sign_column: str = Field("sign", max_length=128, description="relations: the column of +1/-1 signs")
    trigger: str | None = Field(
        None, max_length=64, description='"1 second", "available-now", or none (a batch as soon as the last is done)'
    )
    checkpoint: str | None = Field(
        None, max_length=4096, description="Spark's checkpoint directory (default: per stream)"
    )


class SparkSourceOut(BaseModel):
    """A Spark source's control table: its state, the error that stopped it, and its counters."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(examples=["spark:Orders"])
    stream: str
    kind: str
    source: str = Field(description="what it reads, e.g. csv:/data/orders")
    state: Literal["starting", "running", "finished", "stopped", "failed"]
    error: str | None = Field(None, description="why it failed (Spark's first line)")
    sink: str
    counters: dict[str, Any]
    spec: dict[str, Any] | None = None
