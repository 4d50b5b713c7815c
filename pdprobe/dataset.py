"""The canonical, columnar dataset every analysis reads, whatever the source.

Readers of captured files and the live Prometheus collector each produce ``Partial`` pieces;
``fuse`` merges them into one time-aligned ``Dataset``. Tables are pandas DataFrames with fixed
columns and dtypes (see the ``*_COLUMNS`` mappings); an absent value is NaN / <NA>, and
``Dataset.request_columns`` says which request columns the inputs really carried, so analyses
can tell "not measured" from "measured as missing".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from pdprobe.signals import Role

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# Per-request records. Only the first three are required in inputs.
REQUIRED_REQUEST_COLUMNS: Final = ("arrival_ts", "prompt_tokens", "output_tokens")
REQUEST_COLUMNS: Final[Mapping[str, str]] = {
    "arrival_ts": "float64",  # Unix seconds
    "prompt_tokens": "int64",
    "output_tokens": "int64",
    "request_id": "string",
    "cached_tokens": "float64",  # prompt tokens served from a prefix cache
    # Instance and status columns repeat a few values millions of times: categorical (integer
    # codes, categories sorted, only those used), so groupbys and comparisons run on codes and
    # 10M rows cost 10-40 MB instead of 130 MB of strings per column.
    "prefill_instance": "category",
    "decode_instance": "category",
    "queue_s": "float64",
    "prefill_s": "float64",
    "kv_transfer_s": "float64",
    "kv_bytes": "float64",
    "ttft_s": "float64",
    "tpot_s": "float64",
    "e2e_s": "float64",
    "status": "category",  # ok | error | timeout | aborted (all four always categories)
}
REQUEST_STATUSES: Final = ("ok", "error", "timeout", "aborted")

# Per-instance engine metrics, long format. `kind` is one of signals.KINDS; `le` is the bucket
# upper bound in base units for kind == "bucket" (inf for +Inf) and NaN otherwise.
# Counters and histogram rows are cumulative and already corrected for resets and wraps.
METRIC_COLUMNS: Final[Mapping[str, str]] = {
    "ts": "float64",
    "instance": "string",
    "signal": "string",
    "kind": "string",
    "le": "float64",
    "value": "float64",
}

# Per-node network counters/gauges (RDMA ports, netdevs), long format.
NETWORK_COLUMNS: Final[Mapping[str, str]] = {
    "ts": "float64",
    "node": "string",
    "device": "string",
    "port": "string",
    "signal": "string",
    "kind": "string",
    "value": "float64",
}

# Deployment-level series (a planner's replica counts, a scheduler's routing decisions): numbers
# about a whole deployment, not about one instance, long format. `deployment` is the Dynamo or
# Kubernetes namespace the series names ("" when it names none). Same conventions as metrics.
DEPLOYMENT_COLUMNS: Final[Mapping[str, str]] = {
    "ts": "float64",
    "deployment": "string",
    "signal": "string",
    "kind": "string",
    "value": "float64",
}

# Discrete events: KV-transfer failures, RDMA slice failures, preemptions, warnings.
EVENT_COLUMNS: Final[Mapping[str, str]] = {
    "ts": "float64",
    "instance": "string",
    "event": "string",  # one of signals.EV_*
    "detail": "string",
    "source": "string",  # file:line or query
}


def empty_frame(columns: Mapping[str, str]) -> pd.DataFrame:
    """An empty frame with the given columns and dtypes (so a source without rows still has the
    canonical schema)."""
    import pandas as pd

    return pd.DataFrame({name: pd.Series(pd.Categorical([], categories=sorted(
        category_always(name)))) if dtype == "category" else pd.Series(dtype=dtype)
        for name, dtype in columns.items()})


def canonical_category(column: pd.Series, always: Iterable[str] = ()) -> pd.Series:
    """``column`` as the canonical categorical: string categories sorted (so code order is name
    order, as groupbys and sorts of the strings had it), only the used ones plus ``always``
    (values later code may fill in, such as the statuses). Category operations only: no string
    per row. A canonical column is returned as is.
    """
    import numpy as np
    import pandas as pd

    fixed = set(always)
    if isinstance(column.dtype, pd.CategoricalDtype) and pd.api.types.is_string_dtype(
            column.cat.categories.dtype):
        cats = column.cat.categories
        codes = np.asarray(column.array.codes)  # read-only view: no copy
        keep = used_codes(codes, len(cats)) | cats.isin(list(fixed))
        missing = sorted(fixed - set(cats))
        if keep.all() and not missing and cats.is_monotonic_increasing and \
                cats.dtype == pd.Index(["a"]).dtype:  # pandas' default string categories
            return column
        names = sorted({*(str(c) for c in cats[keep]), *fixed})
        position = pd.Index(names).get_indexer(cats.astype(str))  # old code -> new code
        remap = np.append(np.where(keep, position, -1), -1)
        return pd.Series(pd.Categorical.from_codes(remap[codes], categories=pd.Index(names)),
                         index=column.index, name=column.name)
    text = column.astype("string")
    present = pd.unique(text.dropna().to_numpy(dtype=object))
    names = sorted({*(str(v) for v in present), *fixed})
    values = text.astype(object).where(text.notna(), None).to_numpy()
    return pd.Series(pd.Categorical(values, categories=pd.Index(names)), index=column.index,
                     name=column.name)


# Rows per step of ``used_codes``: its temporaries (a mask, the block's codes as intp) stay
# in cache instead of costing 8 bytes per row at once (80 MB at 10M rows for ``np.bincount``).
USED_CODES_BLOCK_ROWS: Final = 1 << 17


def used_codes(codes: np.ndarray, n: int) -> np.ndarray:
    """Mask of the ``n`` categories some row's code (-1: missing) points at, a block of rows at
    a time: ``np.bincount(codes[codes >= 0], minlength=n) > 0`` without its full-length copies."""
    import numpy as np

    used = np.zeros(n, dtype=bool)
    for start in range(0, codes.size, USED_CODES_BLOCK_ROWS):
        block = codes[start:start + USED_CODES_BLOCK_ROWS]
        used[block[block >= 0]] = True
        if used.all():
            break
    return used


def renamed_values(column: pd.Series, mapping: Mapping[str, str]) -> pd.Series:
    """``column`` with values renamed by ``mapping`` (several may get one name); a categorical
    stays categorical and only its categories are looked at, never the rows."""
    import numpy as np
    import pandas as pd

    if not isinstance(column.dtype, pd.CategoricalDtype):
        return column.replace(dict(mapping))
    cats = [str(c) for c in column.cat.categories]
    new = [mapping.get(c, c) for c in cats]
    names = pd.Index(sorted(set(new)))
    remap = np.append(names.get_indexer(pd.Index(new)), -1)
    codes = np.asarray(column.array.codes)  # read-only view: no copy
    return pd.Series(pd.Categorical.from_codes(remap[codes], categories=names),
                     index=column.index, name=column.name)


def category_always(column: str) -> tuple[str, ...]:
    """Categories a canonical request column always carries (the statuses for ``status``)."""
    return REQUEST_STATUSES if column == "status" else ()


def conform(frame: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    """Return ``frame`` with exactly ``columns`` in order and dtype; absent ones become NA."""
    import pandas as pd

    if list(frame.columns) == list(columns) and all(
            str(frame[c].dtype) == d for c, d in columns.items()):
        cats = {c: canonical_category(frame[c], category_always(c))
                for c, d in columns.items() if d == "category"}
        changed = {c: v for c, v in cats.items() if v is not frame[c]}
        out_frame = frame.assign(**changed) if changed else frame
        return out_frame.reset_index(drop=True)  # already canonical: no copy of 1M-row columns
    out = {}
    n = len(frame)
    for name, dtype in columns.items():
        if name in frame.columns:
            column = frame[name]
            if dtype == "category":
                out[name] = canonical_category(column, category_always(name))
            else:
                out[name] = column if str(column.dtype) == dtype else column.astype(dtype)  # type: ignore[call-overload]
        elif dtype == "category":
            out[name] = pd.Series(pd.Categorical([None] * n, categories=sorted(
                category_always(name))), index=frame.index)
        else:
            out[name] = pd.Series([pd.NA] * n if dtype == "string" else [float("nan")] * n,
                                  dtype=dtype, index=frame.index)
    return pd.DataFrame(out).reset_index(drop=True)


@dataclass(frozen=True)
class RoleHint:
    """One piece of evidence about an instance's role, with where it came from."""

    instance: str
    role: Role
    how: str  # e.g. "label engine_type=prefill in metrics.prom", "name pattern 'prefill' in pod"
    strength: int  # OPTION > LABEL > NAME > EVIDENCE; higher wins
    source: str = ""  # file or query it came from


# Strengths for RoleHint, highest wins.
ROLE_FROM_OPTION: Final = 40
ROLE_FROM_LABEL: Final = 30
ROLE_FROM_NAME: Final = 20
ROLE_FROM_EVIDENCE: Final = 10


@dataclass(frozen=True)
class InstanceKey:
    """One name a source uses for an engine instance, with every fact that source has about it.

    ``name`` is the value the source's rows carry (the metrics/events ``instance`` column, the
    ``prefill_instance``/``decode_instance`` request columns). ``facts`` are what else names the
    same engine process in that source, as ``(kind, value)`` pairs, kinds from ``FACT_KINDS``:
    a scrape's ``instance="10.0.0.5:8000"`` with ``pod="vllm-decode-0"`` is one key with facts
    ``address``, ``pod``, ``namespace``, ``node``, ``job``. The identity step
    (``collectors/identity.py``) unifies keys of all sources into one instance per engine process;
    a reader that reports no key for a name gets one made from the name alone.
    """

    name: str
    facts: tuple[tuple[str, str], ...] = ()
    origin: str = ""  # how the source got the name: "label instance", "file name", "kubectl prefix"

    def fact(self, kind: str) -> str | None:
        """The first value of fact ``kind``, or None."""
        for k, v in self.facts:
            if k == kind:
                return v
        return None


# Fact kinds an InstanceKey may carry. Identity facts name one engine process (address, pod
# with its namespace, a router's backend URL, a container of a compose project, a journald
# unit on a host); context facts (node, job, namespace alone) do not, and are never matched on.
FACT_KINDS: Final = (
    "address",  # host:port as Prometheus' instance label prints it ([v6]:port for IPv6)
    "host",  # a host name or IP without a port
    "port",
    "pod",
    "namespace",
    "pod_ip",
    "container",
    "service",  # docker compose service/container name
    "unit",  # systemd unit (journalctl)
    "node",  # Kubernetes node / machine the instance runs on: context, never an identity
    "hostname",  # the machine's host name from a `hostname` label (node_exporter style): context
    "job",  # Prometheus job: context
    "url",  # a router's backend label as written (server="http://10.0.0.5:8000")
)


@dataclass(frozen=True)
class InstanceInfo:
    """An engine instance (a vLLM/SGLang server, a Dynamo worker) and how its role was decided."""

    name: str
    role: Role
    role_source: str  # human-readable: how the role was decided
    node: str | None = None  # host, to join with network series
    engine: str | None = None  # vllm | sglang | dynamo | trtllm | ...


@dataclass(frozen=True)
class SourceInfo:
    """One input read (a file, a live query set) and what came of it."""

    path: str
    kind: str  # requests | metrics | engine-log | capture | prometheus
    format: str  # parquet, csv, jsonl, azure-trace, mooncake-trace, openmetrics, vllm-log, ...
    rows: int  # records/samples/lines used
    skipped: int = 0  # lines or rows not understood or invalid
    notes: tuple[str, ...] = ()  # assumptions made (year taken from..., instance name from...)


@dataclass(frozen=True)
class Partial:
    """What one reader produced from one input; ``fuse`` merges many of these."""

    source: SourceInfo
    requests: pd.DataFrame | None = None
    metrics: pd.DataFrame | None = None
    network: pd.DataFrame | None = None
    events: pd.DataFrame | None = None
    request_columns: frozenset[str] = frozenset()  # request columns present in this input
    role_hints: tuple[RoleHint, ...] = ()
    nodes: Mapping[str, str] = field(default_factory=dict)  # instance -> node
    engines: Mapping[str, str] = field(default_factory=dict)  # instance -> engine
    warnings: tuple[str, ...] = ()
    keys: tuple[InstanceKey, ...] = ()  # names with their facts; optional (see InstanceKey)
    deployment: pd.DataFrame | None = None  # DEPLOYMENT_COLUMNS rows


@dataclass(frozen=True)
class Alias:
    """One name of a unified instance in one source, and how it was matched to the others."""

    source: str  # file or query
    name: str
    how: str  # "same name", "same host:port", "pod label in metrics.om", "--alias", ...


@dataclass(frozen=True)
class Identity:
    """A unified instance: its canonical name and every name the sources gave it."""

    name: str
    aliases: tuple[Alias, ...]


@dataclass(frozen=True)
class Dataset:
    """The fused, time-aligned view of everything read."""

    requests: pd.DataFrame
    metrics: pd.DataFrame
    network: pd.DataFrame
    events: pd.DataFrame
    instances: tuple[InstanceInfo, ...]
    sources: tuple[SourceInfo, ...]
    request_columns: frozenset[str]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. "running on the bundled sample"
    identities: tuple[Identity, ...] = ()  # how each instance's names across sources were unified
    deployment: pd.DataFrame | None = None  # DEPLOYMENT_COLUMNS rows; None when no input had any

    def has_request_column(self, name: str) -> bool:
        """True when an input really carried this request column (not just the canonical NaN
        filler)."""
        return name in self.request_columns

    def instances_of(self, role: Role) -> tuple[InstanceInfo, ...]:
        """The instances of one role, in dataset order."""
        return tuple(i for i in self.instances if i.role == role)

    def role_of(self, instance: str) -> Role:
        """An instance's role, ``unknown`` for a name the dataset does not list."""
        for info in self.instances:
            if info.name == instance:
                return info.role
        return "unknown"

    @property
    def is_empty(self) -> bool:
        """True when no input gave a request, a metric sample or a network sample."""
        return self.requests.empty and self.metrics.empty and self.network.empty

    def with_notes(self, *notes: str) -> Dataset:
        """The dataset with notes appended (frozen: a new object)."""
        return replace(self, notes=self.notes + tuple(notes))


def concat_frames(frames: Iterable[pd.DataFrame | None], columns: Mapping[str, str]) -> pd.DataFrame:
    """Concatenate conformed frames, or an empty frame with the right columns."""
    import pandas as pd

    parts = [conform(f, columns) for f in frames if f is not None and len(f)]
    if not parts:
        return empty_frame(columns)
    if len(parts) == 1:
        return parts[0]
    # categoricals with different categories concatenate to strings: conform makes them
    # canonical categoricals again
    return conform(pd.concat(parts, ignore_index=True), columns)
