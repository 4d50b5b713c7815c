"""The series policy of the metrics-file reader: which exposed series pdprobe reads and as what.

One row per distinct series key: its catalog specs (names, ``# TYPE``, histogram suffixes), the
instance it names (``metric_names``), the sub-series labels that are summed or dropped (SGLang's
TP ranks and priorities), engine precedence and superseded names. Runs over distinct series,
never per sample.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import metric_names as mn
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.metric_roles import (
    ENGINE_PRIORITY,
    UNLISTED_ENGINE_PRIORITY,
)
from pdprobe.collectors.metric_spec import HIST_SUFFIXES
from pdprobe.collectors.names import name_from_file
from pdprobe.collectors.openmetrics_lexer import (
    SERIES_KEY,
    SHOWN_EXAMPLES,
    Notes,
    Samples,
    label_pattern,
    unescape,
)
from pdprobe.collectors.roles import node_of

if TYPE_CHECKING:
    import pandas as pd


# Labels whose value names the node an instance runs on (Kubernetes relabelling conventions).
NODE_LABELS: Final = ("node", "kubernetes_node", "nodename")


# SGLang writes scheduler metrics from every TP rank with --enable-metrics-for-all-schedulers;
# the ranks report the same batch, so only rank 0 is kept. `priority=""` is SGLang's total.
TP_RANK_LABEL: Final = "tp_rank"


PRIORITY_LABEL: Final = "priority"


# `# TYPE` of a sample that may be a catalog counter exported without its `_total` suffix:
# declared a counter, or not declared at all (None, "untyped", OpenMetrics "unknown").
_COUNTER_OR_UNTYPED: Final = (S.COUNTER, None, "untyped", "unknown")


def resolve_name(name: str, types: dict[str, str]) -> tuple[list[tuple[mc.MetricSpec, str]], bool]:
    """Specs (with the row kind) an exposed sample name feeds; second item: a ``_created`` row."""
    direct = mc.lookup(name, types.get(name))
    found = [(s, s.kind) for s in direct if s.kind != mc.H]
    if not found and direct:
        # A sample named like a histogram family without suffix is a gauge (SGLang <=0.5.3).
        found = [(s, s.kind) for s in mc.lookup(name, "gauge") if s.kind != mc.H]
    if found:
        return found, False
    for suffix, kind in HIST_SUFFIXES:
        if name.endswith(suffix):
            family = name[: -len(suffix)]
            specs = [s for s in mc.lookup(family, types.get(family)) if s.kind == mc.H]
            if specs:
                return [(s, kind) for s in specs], False
    if not name.endswith("_total") and types.get(name) in _COUNTER_OR_UNTYPED:
        # A counter exported without `_total` (old client libraries, Rust prometheus crate,
        # exporters that strip suffixes), with or without `# TYPE`: still the catalog's counter.
        counters = [(s, S.COUNTER) for s in mc.lookup(name + "_total") if s.kind == S.COUNTER]
        if counters:
            return counters, False
    if name.endswith("_created"):
        base = name[: -len("_created")]
        if (types.get(base) in ("counter", "histogram", "summary")
                or mc.lookup(base + "_total") or mc.lookup(base)):
            return [], True
    return [], False


def needed_labels() -> tuple[str, ...]:
    labels: dict[str, None] = dict.fromkeys(
        ("le", "device", "port", TP_RANK_LABEL, PRIORITY_LABEL, *mn.labels_read(),
         *mc.ROLE_LABELS, *NODE_LABELS, "hostname", *mc.DEPLOYMENT_LABELS))
    for spec in mc.ALL_SPECS:
        for lab, _ in spec.label_filter:
            labels[lab] = None
        if spec.instance_label:
            labels[spec.instance_label] = None
    return tuple(labels)


@dataclass
class SeriesMap:
    """The spec rows of the distinct series, plus what the summary needs about the others."""

    frame: pd.DataFrame
    names: list[str]  # metric name per distinct series key
    unknown_sids: np.ndarray  # series whose name pdprobe does not read


def series_table(keys: list[str], types: dict[str, str], path: Path, ctx: ReadContext,
                  out: Notes) -> SeriesMap:
    """One row per (distinct series, spec it feeds): identity, kind, le, labels used for roles.

    Columns: sid, name, kind, signal, scope, engine, scale, bits, aggregate, instance_label,
    frontend, le, instance, node_label, node, device, port, and ``l_<label>`` for the labels
    roles are read from.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    parsed = [SERIES_KEY.match(k) for k in keys]
    names = [(m.group(1) or "") if m else "" for m in parsed]
    blocks = [(m.group(2) or "") if m else "" for m in parsed]
    block_arr = pa.array(blocks, type=pa.large_string())
    # promtool's older `tsdb dump` prints the name as a __name__ label.
    if any(n == "" for n in names):
        dunder = pc.extract_regex(block_arr, label_pattern("__name__")).field("v").to_pylist()
        names = [n or (unescape(d) if d is not None else "") for n, d in zip(names, dunder,
                                                                              strict=True)]
    resolved: dict[str, tuple[list[tuple[mc.MetricSpec, str]], bool]] = {
        n: resolve_name(n, types) for n in set(names)}

    rows_sid: list[int] = []
    rows_spec: list[mc.MetricSpec] = []
    rows_kind: list[str] = []
    unknown: list[int] = []
    for sid, name in enumerate(names):
        specs, is_created = resolved[name]
        if not specs and not is_created:
            unknown.append(sid)
        for spec, kind in specs:
            rows_sid.append(sid)
            rows_spec.append(spec)
            rows_kind.append(kind)
    frame = pd.DataFrame({"sid": np.asarray(rows_sid, dtype=np.int64)})
    unknown_sids = np.asarray(unknown, dtype=np.int64)
    if frame.empty:
        return SeriesMap(frame, names, unknown_sids)
    frame["name"] = [names[i] for i in rows_sid]
    frame["kind"] = rows_kind
    frame["signal"] = [s.signal for s in rows_spec]
    frame["scope"] = [s.scope for s in rows_spec]
    frame["engine"] = [s.engine for s in rows_spec]
    frame["scale"] = [s.scale for s in rows_spec]
    frame["bits"] = [s.counter_bits or 0 for s in rows_spec]
    frame["aggregate"] = [s.aggregate for s in rows_spec]
    frame["instance_label"] = [s.instance_label or "" for s in rows_spec]
    frame["frontend"] = [s.name.startswith("dynamo_frontend_") and s.instance_label is None
                         for s in rows_spec]

    # Labels, from the distinct known series only; absent labels are None.
    known_sids = np.unique(frame["sid"].to_numpy())
    sub = block_arr.take(pa.array(known_sids))
    row_pos = np.searchsorted(known_sids, frame["sid"].to_numpy())
    labels: dict[str, pd.Series] = {}
    for label in needed_labels():
        if not pc.any(pc.match_substring(sub, f"{label}=")).as_py():
            continue
        vals = pc.extract_regex(sub, label_pattern(label)).field("v").to_pylist()
        col = np.array([unescape(v) if v is not None else None for v in vals], dtype=object)
        labels[label] = pd.Series(col[row_pos], dtype=object)
    absent = pd.Series(np.full(len(frame), None, dtype=object), dtype=object)

    def lab(name: str) -> pd.Series:
        """Values of label ``name`` per row; None where absent (or empty)."""
        col = labels.get(name, absent)
        return col.where(col != "", None)

    # Filters: spec label filters, SGLang tp_rank != 0 duplicates, SGLang per-priority parts.
    keep = np.ones(len(frame), dtype=bool)
    spec_ids = np.array([id(sp) for sp in rows_spec])
    for spec in {id(sp): sp for sp in rows_spec if sp.label_filter}.values():
        rows = spec_ids == id(spec)
        for label, allowed in spec.label_filter:
            keep[rows] &= lab(label)[rows].isin(allowed.split("|")).to_numpy()
    tp_drop = _tp_rank_duplicates(frame, lab(TP_RANK_LABEL), blocks, spec_ids)
    if tp_drop.any():
        out.notes.append(f"kept the lowest SGLang tp_rank only: {int(tp_drop.sum())} series of "
                         f"other TP ranks repeat its scheduler numbers")
    keep &= ~tp_drop & ~_priority_parts(frame, labels.get(PRIORITY_LABEL), blocks, spec_ids)

    # Buckets need a numeric `le`.
    le = pd.to_numeric(lab("le"), errors="coerce").to_numpy(dtype=np.float64)
    is_bucket = frame["kind"].to_numpy() == S.BUCKET
    bad_le = is_bucket & np.isnan(le)
    if bad_le.any():
        out.warnings.append(f"{path}: {int(bad_le.sum())} histogram bucket series without a "
                            f"numeric 'le' label were dropped (e.g. "
                            f"{frame['name'].to_numpy()[bad_le][0]})")
    keep &= ~bad_le
    frame["le"] = np.where(is_bucket, le * frame["scale"].to_numpy(), np.nan)

    # Instance: spec label, router backend, instance-like label, --instance or the file name
    # (metric_names says how and why).
    fallback, fallback_how = ((ctx.instance, "--instance") if ctx.instance
                              else name_from_file(path))
    named, naming_notes = mn.name_instances(
        frame, lab, fallback, fallback_how if ctx.instance else f"{fallback_how} {path.name}")
    for name_col in named.columns:
        frame[name_col] = named[name_col].to_numpy()
    by_fallback = frame["name_kind"].to_numpy() == mn.BY_FALLBACK
    if (by_fallback & keep & (frame["scope"].to_numpy() == "instance")).any():
        said = "--instance" if ctx.instance else (
            "the file name" if fallback_how == "file name" else fallback_how)
        out.notes.append(f"series without an instance/pod/job label were assigned to instance "
                         f"{fallback!r} ({said})")
    out.notes.extend(naming_notes)

    # Node of a network series: host part of `instance`, else a node label, else the host part
    # of the instance name (a per-target file 10.0.0.5_9100.prom is node 10.0.0.5).
    host = lab("instance").map(lambda v: node_of(v) if v else None)
    node_label = absent.copy()
    for label in NODE_LABELS:
        node_label = node_label.fillna(lab(label))
    frame["node_label"] = node_label.to_numpy()
    frame["node"] = host.fillna(node_label).fillna(lab("hostname")).fillna(
        frame["instance"].map(node_of)).to_numpy()
    frame["device"] = lab("device").fillna("").to_numpy()
    frame["port"] = lab("port").fillna("").to_numpy()
    for label in (*mc.ROLE_LABELS, "job", "pod", "instance"):
        frame[f"l_{label}"] = lab(label).to_numpy()
    # A deployment-scope series belongs to its deployment, never to an instance: its `instance`
    # column holds the deployment's name (so the per-instance steps below work per deployment).
    is_dep = frame["scope"].to_numpy() == "deployment"
    if is_dep.any():
        deployment = absent.copy()
        for label in mc.DEPLOYMENT_LABELS:
            deployment = deployment.fillna(lab(label))
        frame.loc[is_dep, "instance"] = deployment.fillna("").to_numpy()[is_dep]
    frame = frame[keep].reset_index(drop=True)
    router_drop, router_notes = mn.router_rows_to_drop(frame)
    out.notes.extend(router_notes)
    frame = frame[~router_drop].reset_index(drop=True)
    frame = _engine_own_first(frame)
    return SeriesMap(drop_superseded(frame, out), names, unknown_sids)


def _engine_own_first(frame: pd.DataFrame) -> pd.DataFrame:
    """Where several engines feed one signal of an instance (a Dynamo TRT-LLM worker exposes
    trtllm_request_success_total and dynamo_component_requests_total), keep the engine's own
    series only, as the live collector does (``metric_roles.ENGINE_PRIORITY``)."""
    import pandas as pd


    if frame.empty:
        return frame
    prio = frame["engine"].map(ENGINE_PRIORITY).fillna(UNLISTED_ENGINE_PRIORITY).to_numpy()
    key = [frame["scope"], frame["instance"], frame["signal"], frame["kind"]]
    best = pd.Series(prio).groupby(key, dropna=False, sort=False).transform("min").to_numpy()
    return frame[prio == best].reset_index(drop=True) if (prio != best).any() else frame


_TP_RANK_PAIR: Final = re.compile(rf'(^|,)\s*{TP_RANK_LABEL}\s*=\s*"[^"]*"')


def _tp_rank_duplicates(frame: pd.DataFrame, tp_rank: pd.Series, blocks: list[str],
                        spec_ids: np.ndarray) -> np.ndarray:
    """Rows that repeat a lower TP rank's series (all labels but ``tp_rank`` equal).

    With --enable-metrics-for-all-schedulers every TP rank of a DP group writes the same
    scheduler numbers. Series that differ in another label too (``dp_rank`` with DP attention,
    where each DP group's leader has its own tp_rank) are not duplicates and are all kept.
    """
    import pandas as pd

    has = tp_rank.notna().to_numpy()
    drop = np.zeros(len(frame), dtype=bool)
    if not has.any():
        return drop
    sid = frame["sid"].to_numpy()[has]
    rest = [_TP_RANK_PAIR.sub("", blocks[i]) for i in sid]
    rank = pd.to_numeric(tp_rank[has], errors="coerce").to_numpy(dtype=np.float64)
    groups = pd.DataFrame({"name": frame["name"].to_numpy()[has], "rest": rest,
                           "spec": spec_ids[has], "rank": rank})
    lowest = groups.groupby(["name", "rest", "spec"], sort=False)["rank"].transform("min")
    drop[np.flatnonzero(has)] = (groups["rank"] > lowest).to_numpy()
    return drop


_PRIORITY_PAIR: Final = re.compile(rf'(^|,)\s*{PRIORITY_LABEL}\s*=\s*"[^"]*"')


def _priority_parts(frame: pd.DataFrame, priority: pd.Series | None, blocks: list[str],
                    spec_ids: np.ndarray) -> np.ndarray:
    """Rows of a per-priority series whose ``priority=""`` total is also exposed."""
    import pandas as pd

    drop = np.zeros(len(frame), dtype=bool)
    if priority is None:
        return drop
    has = priority.notna().to_numpy()
    if not has.any():
        return drop
    sid = frame["sid"].to_numpy()[has]
    groups = pd.DataFrame({"name": frame["name"].to_numpy()[has],
                           "rest": [_PRIORITY_PAIR.sub("", blocks[i]) for i in sid],
                           "spec": spec_ids[has],
                           "total": (priority[has] == "").to_numpy()})
    has_total = groups.groupby(["name", "rest", "spec"], sort=False)["total"].transform("any")
    drop[np.flatnonzero(has)] = (has_total & ~groups["total"]).to_numpy(dtype=bool)
    return drop


def family_of(name: str) -> str:
    """The catalog key of an exposed sample name (histogram suffixes stripped)."""
    key = mc.normalise_name(name)
    for suffix, _ in HIST_SUFFIXES:
        if key.endswith(suffix) and key[: -len(suffix)] in mc.SPECS_BY_KEY:
            return key[: -len(suffix)]
    return key


def drop_superseded(frame: pd.DataFrame, out: Notes) -> pd.DataFrame:
    """Drop an old metric name on instances that also expose its successor."""
    if frame.empty:
        return frame
    family = frame["name"].map(family_of)
    present = set(zip(frame["instance"], family, strict=True))
    old_to_new = {mc.normalise_name(o): mc.normalise_name(n) for o, n in mc.SUPERSEDED_BY.items()}
    successor = family.map(old_to_new)
    drop = np.array([isinstance(new, str) and (inst, new) in present
                     for inst, new in zip(frame["instance"], successor, strict=True)], dtype=bool)
    if drop.any():
        names = sorted(set(frame.loc[drop, "name"].map(family_of)))
        out.notes.append(f"ignored deprecated {', '.join(names)} where the successor name is "
                         f"also exposed (same quantity)")
    return frame[~drop].reset_index(drop=True)


def summarise_unknown(samples: Samples, smap: SeriesMap, out: Notes) -> None:
    unknown = smap.unknown_sids
    if not len(unknown):
        return
    names = smap.names
    counts = np.bincount(samples.sid, minlength=len(names))
    unknown_names = {names[sid] for sid in unknown.tolist()}

    def family(name: str) -> str:
        # An unknown histogram is listed once, by family, not as _bucket/_sum/_count.
        for suffix, _ in HIST_SUFFIXES:
            base = name[: -len(suffix)]
            if name.endswith(suffix) and base + "_bucket" in unknown_names:
                return base
        return name

    per_name: dict[str, int] = {}
    for sid in unknown.tolist():
        fam = family(names[sid])
        per_name[fam] = per_name.get(fam, 0) + int(counts[sid])
    total = sum(per_name.values())
    top = sorted(per_name.items(), key=lambda kv: (-kv[1], kv[0]))[:SHOWN_EXAMPLES]
    shown = ", ".join(f"{n or '(no name)'} ({c})" for n, c in top)
    out.notes.append(f"ignored {total} sample(s) of {len(per_name)} metric name(s) pdprobe does "
                     f"not read (most: {shown})")
