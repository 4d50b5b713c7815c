"""Read Prometheus text exposition and OpenMetrics files into the dataset's metric tables.

Accepted inputs (gzip/zstd too): ``promtool tsdb dump-openmetrics`` output (seconds with
fractions, ``# EOF``), ``promtool tsdb dump`` output of older promtools
(``{__name__="...", ...} value ts_ms``), Prometheus text with millisecond timestamps, and
concatenated ``/metrics`` scrapes without timestamps. Only metric names in
``metric_catalog`` are kept; everything else is counted and summarised.

Parsing is columnar: line and token boundaries are found with numpy over the raw bytes, the
tokens become pyarrow arrays (cast to floats, dictionary-encoded series keys), and labels are
pulled with ``pyarrow.compute.extract_regex`` from the (few) distinct series only. Lines the
fast path cannot split (exemplars, odd whitespace, ``#`` inside label values) go through a
per-line regular expression.

Modules: ``openmetrics_lexer`` (bytes -> lines, comments, samples), ``openmetrics_time`` (sample
times), ``openmetrics_series`` (the series policy: names, labels, sub-series, precedence), this
module (samples -> long tables and instance facts); roles are decided by ``metric_roles``, the
stage the live collector shares.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import metric_names as mn
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.io import read_all_bytes
from pdprobe.collectors.metric_roles import (
    ENGINE_PREFERENCE,
    LabelRoles,
    evidence_hints,
)
from pdprobe.collectors.openmetrics_lexer import (
    SHOWN_EXAMPLES,
    Notes,
    Samples,
    comment_lines,
    parse_samples,
    split_lines,
    to_float,
)
from pdprobe.collectors.openmetrics_series import SeriesMap, series_table, summarise_unknown
from pdprobe.collectors.openmetrics_time import most_common, sample_timestamps
from pdprobe.collectors.roles import node_of, role_from_name
from pdprobe.collectors.validate import MAX_METRIC_VALUE, implausible
from pdprobe.dataset import (
    DEPLOYMENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    ROLE_FROM_EVIDENCE,
    ROLE_FROM_NAME,
    Partial,
    RoleHint,
    SourceInfo,
    conform,
)
from pdprobe.errors import InputError
from pdprobe.promql_math import correct_counters_grouped

if TYPE_CHECKING:
    import pandas as pd


_CUMULATIVE_KINDS: Final = frozenset({S.COUNTER, S.BUCKET, S.HSUM, S.HCOUNT})


def read_openmetrics(path: Path, ctx: ReadContext) -> Partial:
    """Read one Prometheus text / OpenMetrics file (see the module docstring)."""
    out = Notes()
    ctx.report(f"reading {path.name}", 0.0)
    data = read_all_bytes(path)
    lines = split_lines(data)
    comments = comment_lines(lines)
    ctx.report(f"parsing {path.name}", 0.2)
    samples, bad_lines = parse_samples(lines, path)
    fmt = "openmetrics" if comments.eof_lines.size else "prometheus-text"
    if bad_lines.size:
        out.skipped += int(bad_lines.size)
        shown = ", ".join(str(n) for n in np.sort(bad_lines)[:SHOWN_EXAMPLES])
        out.warnings.append(f"{path}: skipped {bad_lines.size} malformed line(s) "
                            f"(first at line {shown})")
    if samples.line.size == 0:
        if bad_lines.size:
            raise InputError(f"{path}: no metric sample line could be parsed "
                             f"(first bad line {int(np.min(bad_lines))})",
                             hint="expected Prometheus text or OpenMetrics "
                                  "('name{labels} value [timestamp]')")
        out.warnings.append(f"{path}: no metric samples in the file")
        return _partial(path, fmt, 0, out)

    ts_all = sample_timestamps(path, samples, comments, out)
    ctx.report(f"mapping {path.name}", 0.5)
    smap = series_table(samples.keys, comments.types, path, ctx, out)
    expanded = _expand(samples, smap, ts_all, out, path)
    summarise_unknown(samples, smap, out)
    if expanded is None or expanded[0].empty:
        out.warnings.append(f"{path}: no vLLM/SGLang/Dynamo/node_exporter metrics (none of its "
                            f"metric names is one pdprobe reads)")
        return _partial(path, fmt, 0, out)
    ctx.report(f"combining {path.name}", 0.8)
    used, series = expanded
    metrics, network, deployment = _combine(used, series)
    hints, engines, nodes = _instance_facts(series, metrics, path, out)
    keys = mn.instance_keys(series[series["scope"] == "instance"])
    ctx.report(f"read {path.name}", 1.0)
    metrics_df = conform(metrics, METRIC_COLUMNS) if len(metrics) else None
    network_df = conform(network, NETWORK_COLUMNS) if len(network) else None
    deployment_df = conform(deployment, DEPLOYMENT_COLUMNS) if len(deployment) else None
    rows = len(used)  # samples read into the tables (one per signal they feed)
    source = SourceInfo(path=str(path), kind="metrics", format=fmt, rows=rows,
                        skipped=out.skipped, notes=tuple(dict.fromkeys(out.notes)))
    return Partial(source=source, metrics=metrics_df, network=network_df,
                   role_hints=tuple(hints), nodes=nodes, engines=engines,
                   warnings=tuple(dict.fromkeys(out.warnings)), keys=keys,
                   deployment=deployment_df)


def _partial(path: Path, fmt: str, rows: int, out: Notes) -> Partial:
    source = SourceInfo(path=str(path), kind="metrics", format=fmt, rows=rows,
                        skipped=out.skipped, notes=tuple(dict.fromkeys(out.notes)))
    return Partial(source=source, warnings=tuple(dict.fromkeys(out.warnings)))


# --------------------------------------------------------------------------------------------
# Samples -> corrected, combined rows
# --------------------------------------------------------------------------------------------


def _expand(samples: Samples, smap: SeriesMap, ts_all: np.ndarray, out: Notes,
            path: Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Samples as (row, ts, value) per spec row, sorted by (row, ts), corrected and scaled;
    with the spec rows (``row`` indexes them)."""
    import pandas as pd
    import pyarrow as pa

    series = smap.frame
    if series.empty:
        return None
    n_keys = len(smap.names)
    sid_rows = series["sid"].to_numpy()
    counts = np.bincount(sid_rows, minlength=n_keys)
    first = np.zeros(n_keys, dtype=np.int64)
    order = np.argsort(sid_rows, kind="stable")
    series = series.iloc[order].reset_index(drop=True)
    sid_rows = series["sid"].to_numpy()
    first[:] = np.searchsorted(sid_rows, np.arange(n_keys), side="left")

    known = counts[samples.sid] > 0
    idx = np.flatnonzero(known & ~np.isnan(ts_all))
    if idx.size == 0:
        return None
    values = to_float(samples.value_tok.take(pa.array(idx)))
    sid = samples.sid[idx]
    ts = ts_all[idx]
    line = samples.line[idx]
    rep = counts[sid]
    take = np.repeat(np.arange(idx.size), rep)
    offs = np.arange(take.size) - np.repeat(np.cumsum(rep) - rep, rep)
    row = first[sid[take]] + offs
    values, ts, line = values[take], ts[take], line[take]

    # Drop NaN/Inf values (Prometheus staleness markers are NaN), naming the metrics; then
    # values no signal can take: every signal read is a count, duration, size, ratio or rate, so
    # a negative value or one beyond any 64-bit counter is not a reading (it would become
    # -820 req/s downstream).
    names_of_row = series["name"].to_numpy()
    finite = np.isfinite(values)
    bad_value, why = implausible(np.where(finite, values, np.nan), 0.0, MAX_METRIC_VALUE)
    for bad, what in ((~finite, "NaN/Inf sample value(s) (Prometheus staleness markers are NaN)"),
                      (bad_value,
                       f"sample value(s) no engine reports ({why})")):
        if bad.any():
            out.warnings.append(f"{path}: dropped {int(bad.sum())} {what}: "
                                f"{most_common(names_of_row[row[bad]])}")
    keep = finite & ~bad_value
    if not keep.all():
        values, ts, line, row = values[keep], ts[keep], line[keep], row[keep]

    # Per raw series: time order (warn when the file was not), one sample per timestamp.
    by_row = np.argsort(row, kind="stable")
    r_sorted, t_sorted = row[by_row], ts[by_row]
    back = (r_sorted[1:] == r_sorted[:-1]) & (t_sorted[1:] < t_sorted[:-1])
    if back.any():
        n_series = np.unique(r_sorted[1:][back]).size
        out.warnings.append(f"{path}: timestamps out of order in {n_series} series; samples "
                            f"were sorted by time")
    o = np.lexsort((line, ts, row))
    values, ts, row = values[o], ts[o], row[o]
    dup = np.zeros(row.size, dtype=bool)
    dup[:-1] = (row[1:] == row[:-1]) & (ts[1:] == ts[:-1])
    if dup.any():
        out.warnings.append(f"{path}: {int(dup.sum())} sample(s) repeat a series' timestamp; "
                            f"the later line was kept")
        keep = ~dup
        values, ts, row = values[keep], ts[keep], row[keep]

    kind = series["kind"].to_numpy()[row]
    cumulative = np.isin(kind, list(_CUMULATIVE_KINDS))
    if cumulative.any():
        bits = series["bits"].to_numpy()[row[cumulative]]
        values[cumulative] = correct_counters_grouped(row[cumulative], values[cumulative],
                                                      bits if bits.any() else None)
    scaled = np.isin(kind, [S.GAUGE, S.COUNTER, S.HSUM])
    values = np.where(scaled, values * series["scale"].to_numpy()[row], values)
    return pd.DataFrame({"row": row, "ts": ts, "value": values}), series


def _combine(used: pd.DataFrame, series: pd.DataFrame
             ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Combine the sub-series of an instance (engine=, dp_rank=, ...) per timestamp; the
    third table holds the deployment-scope rows (their ``instance`` is the deployment)."""
    import pandas as pd

    ident_cols_i = ["scope", "instance", "signal", "kind", "le"]
    ident_cols_n = ["node", "device", "port", "signal", "kind"]
    scope = series["scope"].to_numpy()
    is_net = scope == "network"
    ident = np.zeros(len(series), dtype=np.int64)
    inst_part = series.loc[~is_net, ident_cols_i].copy()
    net_part = series.loc[is_net, ident_cols_n].copy()
    n_inst = 0
    if len(inst_part):
        codes = inst_part.groupby(ident_cols_i, sort=False, dropna=False).ngroup().to_numpy()
        ident[~is_net] = codes
        n_inst = int(codes.max()) + 1
    if len(net_part):
        codes = net_part.groupby(ident_cols_n, sort=False, dropna=False).ngroup().to_numpy()
        ident[is_net] = codes + n_inst
    row = used["row"].to_numpy()
    ts = used["ts"].to_numpy()
    val = used["value"].to_numpy()
    kind = series["kind"].to_numpy()[row]
    agg = series["aggregate"].to_numpy()[row]
    gid = ident[row]
    cumulative = np.isin(kind, list(_CUMULATIVE_KINDS)) & (agg == "sum")

    parts = []
    if cumulative.any():
        r, t, v, g = row[cumulative], ts[cumulative], val[cumulative], gid[cumulative]
        subs = pd.DataFrame({"g": g, "r": r}).drop_duplicates().groupby("g")["r"].size()
        multi = np.isin(g, subs.index[subs.to_numpy() > 1].to_numpy())
        if (~multi).any():
            parts.append(pd.DataFrame({"gid": g[~multi], "ts": t[~multi],
                                       "value": v[~multi]}))
        if multi.any():
            # The sum of the sub-series' latest values at each timestamp: add up increments per
            # raw series (its first sample adds its whole value) in time order per identity.
            r, t, v, g = r[multi], t[multi], v[multi], g[multi]
            inc = v.copy()
            same = np.zeros(r.size, dtype=bool)
            same[1:] = r[1:] == r[:-1]
            inc[same] = v[same] - v[np.flatnonzero(same) - 1]
            o = np.lexsort((t, g))
            g, t, inc = g[o], t[o], inc[o]
            total = pd.Series(inc).groupby(g).cumsum().to_numpy()
            last = np.ones(g.size, dtype=bool)
            last[:-1] = (g[1:] != g[:-1]) | (t[1:] != t[:-1])
            parts.append(pd.DataFrame({"gid": g[last], "ts": t[last], "value": total[last]}))
    other = ~cumulative
    if other.any():
        frame = pd.DataFrame({"gid": gid[other], "ts": ts[other], "value": val[other],
                              "agg": agg[other]})
        for how, part in frame.groupby("agg", sort=True):
            parts.append(part.groupby(["gid", "ts"], sort=True)["value"].agg(str(how))
                         .reset_index())
    combined = pd.concat(parts, ignore_index=True).sort_values(["gid", "ts"], kind="stable")

    first_row = pd.Series(np.arange(len(series))).groupby(ident).first()
    rep = first_row.reindex(combined["gid"].to_numpy()).to_numpy()
    net_rows = is_net[rep]
    dep_rows = scope[rep] == "deployment"
    inst_rows = ~net_rows & ~dep_rows
    cols = {c: series[c].to_numpy()[rep] for c in
            ("instance", "node", "device", "port", "signal", "kind", "le")}
    metrics = pd.DataFrame({
        "ts": combined["ts"].to_numpy()[inst_rows],
        "instance": cols["instance"][inst_rows],
        "signal": cols["signal"][inst_rows],
        "kind": cols["kind"][inst_rows],
        "le": cols["le"][inst_rows].astype(np.float64),
        "value": combined["value"].to_numpy()[inst_rows],
    })
    deployment = pd.DataFrame({
        "ts": combined["ts"].to_numpy()[dep_rows],
        "deployment": cols["instance"][dep_rows],
        "signal": cols["signal"][dep_rows],
        "kind": cols["kind"][dep_rows],
        "value": combined["value"].to_numpy()[dep_rows],
    })
    network = pd.DataFrame({
        "ts": combined["ts"].to_numpy()[net_rows],
        "node": cols["node"][net_rows],
        "device": cols["device"][net_rows],
        "port": cols["port"][net_rows],
        "signal": cols["signal"][net_rows],
        "kind": cols["kind"][net_rows],
        "value": combined["value"].to_numpy()[net_rows],
    })
    return metrics, network, deployment


# --------------------------------------------------------------------------------------------
# Roles, engines, nodes
# --------------------------------------------------------------------------------------------


def _instance_facts(series: pd.DataFrame, metrics: pd.DataFrame, path: Path,
                    out: Notes) -> tuple[list[RoleHint], dict[str, str], dict[str, str]]:
    src = str(path)
    inst_rows = series[series["scope"] == "instance"]
    # Label by label (every instance's `role`, then `engine_type`, ...): the order decides
    # which of two agreeing hints names the role's source.
    reader = LabelRoles(src)
    hints: list[RoleHint] = []
    for label in mc.ROLE_LABELS:
        pairs = inst_rows[["instance", f"l_{label}"]].dropna().drop_duplicates()
        for inst, value in pairs.itertuples(index=False):
            hint = reader.add(str(inst), label, str(value))
            if hint is not None:
                hints.append(hint)
    hints.extend(reader.generic_hints())
    out.notes.extend(reader.notes())

    # Name patterns in pod, instance, job (most specific first), for instances named by them;
    # in the backend URL for a router's backends (the router's pod/instance/job are its own).
    named = inst_rows[inst_rows["instance_label"] == ""]
    for inst, grp in named.groupby("instance", sort=True):
        direct = grp[grp["name_kind"] != mn.BY_BACKEND]
        by_backend = direct.empty
        grp = grp if by_backend else direct
        for label in ("backend_url",) if by_backend else ("pod", "instance", "job"):
            values = grp[label if by_backend else f"l_{label}"].dropna().unique().tolist()
            roles = {r for r in (role_from_name(str(v)) for v in values) if r}
            if len(roles) == 1:
                role = roles.pop()
                hints.append(RoleHint(str(inst), role,
                                      f"name pattern in {label} {values[0]!r}", ROLE_FROM_NAME,
                                      src))
                break

    frontends = sorted(set(inst_rows.loc[inst_rows["frontend"].astype(bool), "instance"]))
    hints.extend(evidence_hints(metrics[~metrics["instance"].isin(frontends)], src,
                                out.warnings))
    for inst in frontends:
        hints.append(RoleHint(str(inst), "frontend", "Dynamo frontend metrics (dynamo_frontend_*)",
                              ROLE_FROM_EVIDENCE, src))

    engines: dict[str, str] = {}
    rank = {e: i for i, e in enumerate(ENGINE_PREFERENCE)}
    for inst, eng in inst_rows[["instance", "engine"]].drop_duplicates().itertuples(index=False):
        cur = engines.get(str(inst))
        if cur is None or rank.get(str(eng), 99) < rank.get(cur, 99):
            engines[str(inst)] = str(eng)
    nodes: dict[str, str] = {}
    for inst, node_label, inst_label, kind, addr_host in inst_rows[
            ["instance", "node_label", "l_instance", "name_kind", "addr_host"]] \
            .drop_duplicates().itertuples(index=False):
        node_label = node_label if isinstance(node_label, str) else None  # NaN when absent
        addr_host = addr_host if isinstance(addr_host, str) else None
        inst_label = inst_label if isinstance(inst_label, str) else None
        if kind == mn.BY_BACKEND:
            if addr_host:  # the backend's host; the node labels are the router's
                nodes[str(inst)] = addr_host
            continue
        if node_label:
            nodes[str(inst)] = node_label
        elif kind == mn.BY_FALLBACK and addr_host:
            nodes[str(inst)] = addr_host  # per-target file 10.0.0.5_8000.prom
        elif inst_label and str(inst) != inst_label:
            continue  # named by worker_id/pod: its node is not the scraping target's
        elif inst_label:
            host = node_of(inst_label)
            if host:
                nodes[str(inst)] = host
    return hints, engines, nodes
