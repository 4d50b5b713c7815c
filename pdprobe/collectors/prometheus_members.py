"""Which series of a live answer feed which catalog spec, and the grid helpers of the group rows.

``_members`` pairs each series of one batch's answer with the specs of its family (instance,
node/device/port, kind, scaled ``le``) as arrays; ``_grid``, ``_ffill_rows`` and ``_group_ids``
place samples on the query grid, carry cumulative values forward and number groups. Used by
``prometheus_rows``; everything is vectorised over series and grid columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.metric_catalog import MetricSpec
from pdprobe.collectors.metric_names import name_label_sets
from pdprobe.collectors.prometheus_decode import SeriesSet
from pdprobe.collectors.roles import node_of
from pdprobe.errors import SourceError

_KINDS: Final = (S.GAUGE, S.COUNTER, S.BUCKET, S.HSUM, S.HCOUNT)


_KIND_CODE: Final = {k: i for i, k in enumerate(_KINDS)}


def _grid(sset: SeriesSet) -> tuple[np.ndarray, np.ndarray]:
    """Column of every sample and the column timestamps: the query's grid, or for raw samples
    (``step_s == 0``) the distinct sample times."""
    if sset.points == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    if sset.step_s <= 0:
        grid = np.unique(sset.ts)
        return np.searchsorted(grid, sset.ts).astype(np.int64), grid
    col = np.rint((sset.ts - sset.start_ts) / sset.step_s).astype(np.int64)
    if col.min() < 0:
        raise SourceError("Prometheus answered a range query with samples before its start",
                          hint="check that --prometheus is a Prometheus-compatible API")
    n = int(col.max()) + 1
    return col, sset.start_ts + np.arange(n) * sset.step_s


def _ffill_rows(m: np.ndarray) -> np.ndarray:
    """Forward-fill NaN along each row; NaN before a row's first value becomes 0."""
    valid = ~np.isnan(m)
    idx = np.where(valid, np.arange(m.shape[1])[None, :], 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    out = m[np.arange(m.shape[0])[:, None], idx]
    seen = np.maximum.accumulate(valid, axis=1)
    return np.where(seen, out, 0.0)


def _group_ids(*columns: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Dense group number of each row of the given key columns (vectorised)."""
    import pandas as pd

    code = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        codes, uniques = pd.factorize(np.asarray(col), use_na_sentinel=False)
        code = code * max(1, len(uniques)) + codes
    return np.unique(code, return_inverse=True)[1].reshape(-1)


@dataclass(frozen=True)
class _Members:
    """The (series, spec) pairs of one answer, one array element per pair."""

    specs: list[tuple[pp.Family, MetricSpec]]  # indexed by ``spec``
    series: np.ndarray  # row in the answer
    spec: np.ndarray
    kind: np.ndarray  # _KIND_CODE
    le: np.ndarray  # scaled bucket bound, NaN for other kinds
    ident: np.ndarray  # instance (engine scope) or ""
    node: np.ndarray
    device: np.ndarray
    port: np.ndarray
    notes: tuple[str, ...] = ()


def _members(batch: pp.Batch, labels: Sequence[dict[str, str]],
             by_name: Mapping[str, tuple[pp.Family, str]], node_label: str | None
             ) -> _Members | None:
    """The (series, spec) pairs of a batch's answer, series-major, as arrays.

    A series counts when its name belongs to the batch, it names an instance and, for a
    bucket, its ``le`` is a number; it feeds every spec of its family that has the batch's
    label filter (the server applied that filter). Label lookups run per series in list
    comprehensions, everything else per distinct name or instance.
    """
    import pandas as pd

    network = batch.scope == "network"
    deployment = batch.scope == "deployment"
    inst_label = batch.instance_label
    notes: list[str] = []
    names = np.array([lab.get("__name__", "") for lab in labels], dtype=object)
    if deployment:  # the deployment's name: first of its labels present, else ""
        insts = np.array([next((lab[d] for d in mc.DEPLOYMENT_LABELS if lab.get(d)), "")
                          for lab in labels], dtype=object)
    else:
        insts = np.array([lab.get(inst_label, "") for lab in labels], dtype=object)
        backend = [b for b in batch.by_labels if b in mc.BACKEND_LABEL_NAMES]
        if not network and (inst_label in mc.BACKEND_LABEL_NAMES
                            or any(lab.get(b) for b in backend for lab in labels)):
            # Router series about their backends: named as the file reader names them.
            signals = np.array([by_name[n][0].spec.signal if n in by_name else ""
                                for n in names.tolist()], dtype=object)
            spec_label = "" if inst_label == "instance" else inst_label
            insts, notes = name_label_sets(labels, names, signals, spec_label, batch.engine,
                                           ("__name__", inst_label, *batch.by_labels))
    name_code, uniq_names = pd.factorize(names)
    # Per distinct name: its kind and the ids of the specs it feeds (ids in first-seen order).
    specs: list[tuple[pp.Family, MetricSpec]] = []
    spec_ids: dict[tuple[str, int], int] = {}
    name_kind = np.full(len(uniq_names), -1, dtype=np.int64)
    name_specs: list[list[int]] = [[] for _ in range(len(uniq_names))]
    first_seen = np.full(len(uniq_names), len(labels), dtype=np.int64)
    np.minimum.at(first_seen, name_code, np.arange(len(labels)))
    for u in np.argsort(first_seen, kind="stable"):  # loop over names, in series order
        found = by_name.get(str(uniq_names[u]))
        if found is None:
            continue
        fam, kind = found
        name_kind[u] = _KIND_CODE[kind]
        ids = []
        for j, spec in enumerate(fam.specs):
            if spec.label_filter != batch.label_filter:
                continue
            sid = spec_ids.get((fam.exposed, j))
            if sid is None:
                sid = spec_ids[(fam.exposed, j)] = len(specs)
                specs.append((fam, spec))
            ids.append(sid)
        name_specs[u] = ids
    kinds = name_kind[name_code]
    ok = (kinds >= 0) & ((insts != "") | deployment)
    le = np.full(len(labels), np.nan)
    bucket = ok & (kinds == _KIND_CODE[S.BUCKET])
    if bucket.any():
        raw_le = [labels[int(i)].get("le", "nan") for i in np.flatnonzero(bucket)]
        le[bucket] = pd.to_numeric(pd.Series(raw_le, dtype=object), errors="coerce").to_numpy(
            dtype=np.float64)
        ok &= ~(bucket & np.isnan(le))
    n_specs = np.asarray([len(ids) for ids in name_specs], dtype=np.int64)
    per_series = np.where(ok, n_specs[name_code], 0)
    if not per_series.any():
        return None
    series = np.repeat(np.arange(len(labels)), per_series)
    offsets = np.concatenate(([0], np.cumsum(n_specs)))
    flat_specs = np.asarray([sid for ids in name_specs for sid in ids], dtype=np.int64)
    within = np.arange(len(series)) - np.repeat(np.cumsum(per_series) - per_series, per_series)
    spec_of = flat_specs[offsets[name_code[series]] + within]
    kind_of = kinds[series]
    scale = np.asarray([sp.scale for _, sp in specs], dtype=np.float64)
    m_le = np.where(kind_of == _KIND_CODE[S.BUCKET], le[series] * scale[spec_of], np.nan)
    blank = np.full(len(series), "", dtype=object)
    rows = series.tolist()
    if network:
        inst_code, uniq_insts = pd.factorize(insts[series])
        hosts = np.array([node_of(str(i)) or str(i) for i in uniq_insts], dtype=object)
        return _Members(specs, series, spec_of, kind_of, m_le, blank, hosts[inst_code],
                        np.array([labels[i].get("device", "") for i in rows], dtype=object),
                        np.array([labels[i].get("port", "") for i in rows], dtype=object))
    node = (np.array([labels[i].get(node_label, "") for i in rows], dtype=object)
            if node_label else blank)
    return _Members(specs, series, spec_of, kind_of, m_le, insts[series], node, blank, blank,
                    tuple(notes))
