"""How the metrics-file reader names instances, and the ``InstanceKey`` facts it reports.

A series names its instance, in this order of precedence:

1. the spec's own instance label (Dynamo's per-worker ``worker_id``);
2. a router's backend label (``metric_catalog.BACKEND_LABELS``: production-stack's
   ``server="http://10.0.0.5:8000"``, SGLang's gateway ``worker_addr``, ...) whose value is an
   address or URL: the backend, normalised to ``host:port``, is the instance; the router's own
   ``instance``/``pod``/``job`` labels describe the router and are context only;
3. the first present of ``metric_catalog.INSTANCE_LABELS`` (``instance``, ``pod``, ...). A pod
   name that two namespaces share in one file becomes ``namespace/pod``;
4. ``--instance``, else the file name read by ``names.name_from_file``
   (``10.0.0.5_8000.prom`` -> ``10.0.0.5:8000``).

Everything here runs over the distinct-series table (one row per distinct series and spec),
never per sample. Sub-series labels (``engine``, ``dp_rank``, ``tp_rank``, ``pp_rank``, ...)
play no part: they are summed or averaged into their instance later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import names
from pdprobe.collectors.roles import node_of
from pdprobe.dataset import FACT_KINDS, InstanceKey

if TYPE_CHECKING:
    import pandas as pd

# Labels giving facts about the instance a series belongs to (besides the naming labels).
POD_IP_LABELS: Final = ("pod_ip", "kubernetes_pod_ip")
CONTAINER_LABELS: Final = ("container", "container_name", "kubernetes_container_name")

# How a row got its instance name (column ``name_kind``).
BY_SPEC: Final = "spec"  # the spec's own label (worker_id): the frontend's labels are not facts
BY_BACKEND: Final = "backend"  # a router's backend label
BY_LABEL: Final = "label"  # instance, pod, hostname, job, ...
BY_FALLBACK: Final = "fallback"  # --instance or the file name

# Columns this module adds to the series table.
FACT_COLUMNS: Final = ("f_pod", "f_namespace", "f_pod_ip", "f_container", "f_job", "f_hostname")
# Examples a note lists.
SHOWN_EXAMPLES: Final = 3

_FACT_ORDER: Final = {k: i for i, k in enumerate(FACT_KINDS)}


def labels_read() -> tuple[str, ...]:
    """Every label this module looks at (the reader extracts only the labels it needs)."""
    return tuple(dict.fromkeys((*mc.BACKEND_LABEL_NAMES, *mc.INSTANCE_LABELS, *mc.POD_LABELS,
                                *mc.NAMESPACE_LABELS, *POD_IP_LABELS, *CONTAINER_LABELS)))


def backend_address(value: str) -> str | None:
    """``host:port`` of a backend label value that is an address or URL; None otherwise.

    ``http://10.0.0.5:8000/`` -> ``10.0.0.5:8000``, ``http://[2001:db8::5]:8000`` ->
    ``[2001:db8::5]:8000``, ``http://vllm-svc`` -> ``vllm-svc:80``, a bare IP is itself. A bare
    name without a port (``http-metrics``, an nginx upstream name) is not an address.
    """
    parsed = names.split_address(value)
    if parsed is None:
        return None
    host, port = parsed
    if port is not None:
        return names.address(host, port)
    return host if names.is_ip(host) else None


def _first(lab: Callable[[str], pd.Series], labels: tuple[str, ...]) -> pd.Series:
    out = lab(labels[0])
    for label in labels[1:]:
        out = out.fillna(lab(label))
    return out


def name_instances(frame: pd.DataFrame, lab: Callable[[str], pd.Series], fallback: str,
                   fallback_how: str) -> tuple[pd.DataFrame, list[str]]:
    """Instance name and naming facts per row of the series table; notes on what was done.

    ``lab(label)`` gives the label's value per row (None where absent). Returned columns:
    ``instance``, ``name_kind`` (``BY_*``), ``origin`` (human-readable, for ``InstanceKey``),
    ``backend_url`` (the backend label as written), ``addr_host`` (host of a backend or
    file-name address: the instance's node), and ``FACT_COLUMNS``.
    """
    import pandas as pd

    n = len(frame)
    inst = np.full(n, None, dtype=object)
    kind = np.full(n, "", dtype=object)
    origin = np.full(n, "", dtype=object)
    url = np.full(n, None, dtype=object)
    addr_host = np.full(n, None, dtype=object)
    notes: list[str] = []

    spec_label = frame["instance_label"].to_numpy()
    for label in sorted(set(spec_label) - {"", *mc.BACKEND_LABEL_NAMES}):
        # A router's backend label (production-stack's own series, instance_label="server")
        # names its backend below, normalised like every backend address.
        spec_value = lab(label).to_numpy()
        rows = (spec_label == label) & pd.notna(spec_value)
        inst[rows], kind[rows], origin[rows] = spec_value[rows], BY_SPEC, f"label {label}"

    backends: dict[str, tuple[str, str]] = {}  # label -> an example (value, name)
    for label in mc.BACKEND_LABEL_NAMES:
        value = lab(label)
        if not value.notna().any():
            continue
        addrs = {v: backend_address(str(v)) for v in value.dropna().unique()}
        addr = value.map(addrs).to_numpy()
        rows = pd.isna(inst) & pd.notna(addr)
        if not rows.any():
            continue
        inst[rows], kind[rows] = addr[rows], BY_BACKEND
        origin[rows] = f"label {label} (router backend)"
        url[rows] = value.to_numpy()[rows]
        addr_host[rows] = [node_of(a) for a in addr[rows]]
        first = int(np.flatnonzero(rows)[0])
        backends[label] = (str(url[first]), str(inst[first]))
    if backends:
        routers = sorted({str(v) for v in lab("instance").to_numpy()[kind == BY_BACKEND]
                          if v is not None})
        shown = "; ".join(f"{lab_}={v!r} -> {name!r}" for lab_, (v, name) in backends.items())
        notes.append(f"{len(set(inst[kind == BY_BACKEND]))} instance(s) named by a router's "
                     f"backend label ({shown}); the router's own target"
                     f"{' ' + ', '.join(routers[:SHOWN_EXAMPLES]) if routers else ''} is "
                     f"context, not an instance")

    rank_ids = np.isin(frame["engine"].to_numpy(), list(mc.RANK_WORKER_ID_ENGINES))
    for label in mc.INSTANCE_LABELS:
        label_value = lab(label).to_numpy()
        rows = pd.isna(inst) & pd.notna(label_value)
        if label == "worker_id":
            rows &= ~rank_ids  # LMCache's worker_id is a TP rank inside one instance
        inst[rows], kind[rows], origin[rows] = label_value[rows], BY_LABEL, f"label {label}"

    namespace = _first(lab, mc.NAMESPACE_LABELS)
    _namespace_pods(inst, origin, namespace.to_numpy(), notes)

    missing = pd.isna(inst)
    inst[missing], kind[missing], origin[missing] = fallback, BY_FALLBACK, fallback_how
    if missing.any():
        parsed = names.split_address(fallback)
        if parsed is not None and parsed[1] is not None:
            addr_host[missing] = parsed[0]

    out = pd.DataFrame({"instance": inst, "name_kind": kind, "origin": origin,
                        "backend_url": url, "addr_host": addr_host}, index=frame.index)
    out["f_pod"] = _first(lab, mc.POD_LABELS).to_numpy()
    out["f_namespace"] = namespace.to_numpy()
    out["f_pod_ip"] = _first(lab, POD_IP_LABELS).to_numpy()
    out["f_container"] = _first(lab, CONTAINER_LABELS).to_numpy()
    out["f_job"] = lab("job").to_numpy()
    out["f_hostname"] = lab("hostname").to_numpy()
    return out, notes


def _namespace_pods(inst: np.ndarray, origin: np.ndarray, namespace: np.ndarray,
                    notes: list[str]) -> None:
    """Rows named by a pod label whose pod name two namespaces share: ``namespace/pod``."""
    import pandas as pd

    by_pod = np.isin(origin, [f"label {p}" for p in mc.POD_LABELS]) & pd.notna(namespace)
    if not by_pod.any():
        return
    pods = pd.DataFrame({"pod": inst[by_pod], "ns": namespace[by_pod]})
    shared = (pods.groupby("pod", sort=False)["ns"].transform("nunique") > 1).to_numpy()
    if not shared.any():
        return
    rows = np.flatnonzero(by_pod)[shared]
    inst[rows] = [f"{ns}/{pod}" for ns, pod in zip(namespace[rows], inst[rows], strict=True)]
    origin[rows] = [f"labels namespace, {o.removeprefix('label ')}" for o in origin[rows]]
    clashes = sorted(set(pods["pod"].to_numpy()[shared]))
    notes.append(f"pod name(s) {', '.join(clashes[:SHOWN_EXAMPLES])} appear in more than one "
                 f"namespace: those instances are named namespace/pod")


def router_rows_to_drop(frame: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Rows of router series not read: the router's own view of a backend
    (``metric_catalog.ROUTER_OWN_VIEW``), and backend series of a quantity the same file also
    has from the engine's own scrape (both would be summed into one instance)."""
    is_backend = frame["name_kind"].to_numpy() == BY_BACKEND
    drop = np.zeros(len(frame), dtype=bool)
    notes: list[str] = []
    if not is_backend.any():
        return drop, notes
    rows = np.flatnonzero(is_backend)
    label = [o.split(" ", 2)[1] for o in frame["origin"].to_numpy()[rows]]
    key = [mc.normalise_name(n) for n in frame["name"].to_numpy()[rows]]
    own = np.array([(k, lbl) in mc.ROUTER_OWN_VIEW for k, lbl in zip(key, label, strict=True)],
                   dtype=bool)
    drop[rows[own]] = True
    if own.any():
        shown = ", ".join(sorted(set(frame["name"].to_numpy()[rows[own]])))
        notes.append(f"ignored {int(own.sum())} router series that are the router's own view of "
                     f"a backend, not the engine's ({shown}; see metric_catalog.ROUTER_SERIES)")
    ident = frame["instance"].astype(str) + "\x00" + frame["signal"].astype(str)
    direct = set(ident.to_numpy()[~is_backend])
    dup = is_backend & ~drop & ident.isin(direct).to_numpy()
    if dup.any():
        drop |= dup
        shown = ", ".join(sorted(set(frame["signal"].to_numpy()[dup]))[:SHOWN_EXAMPLES])
        notes.append(f"ignored {int(dup.sum())} router series of backends this file also has "
                     f"from the engine's own scrape (used those instead): {shown}")
    return drop, notes


_KEY_COLUMNS: Final = ("instance", "name_kind", "origin", "backend_url", "l_instance",
                       "node_label", *FACT_COLUMNS)


def instance_keys(rows: pd.DataFrame) -> tuple[InstanceKey, ...]:
    """One ``InstanceKey`` per instance of ``rows`` (the instance-scope series table), with every
    fact its distinct series give, sorted by fact kind."""
    if rows.empty:
        return ()
    distinct = rows[list(_KEY_COLUMNS)].astype(object).drop_duplicates()
    facts: dict[str, dict[tuple[str, str], None]] = {}
    origins: dict[str, dict[str, None]] = {}
    for rec in distinct.to_dict("records"):
        name = str(rec["instance"])
        origins.setdefault(name, {})[str(rec["origin"])] = None
        found = facts.setdefault(name, {})
        for fact in _row_facts({str(k): v for k, v in rec.items()}):
            found[fact] = None
    keys = []
    for name in sorted(facts):
        ordered = sorted(facts[name], key=lambda f: (_FACT_ORDER.get(f[0], 99), f[1]))
        keys.append(InstanceKey(name, tuple(ordered), "; ".join(origins[name])))
    return tuple(keys)


def _present(value: object) -> str | None:
    return None if value is None or value != value or value == "" else str(value)


def _row_facts(rec: dict[str, object]) -> list[tuple[str, str]]:
    kind = rec["name_kind"]
    name = str(rec["instance"])
    if kind == BY_SPEC:
        return []  # worker_id: the series' pod/job/instance labels are the frontend's
    if kind == BY_BACKEND:
        out = [f for f in names.facts_of(name) if f[0] != "pod"]
        url = _present(rec["backend_url"])
        return out + ([("url", url)] if url else [])
    out = []
    origin = str(rec["origin"])
    inst_label = _present(rec["l_instance"])
    if inst_label is not None:
        out.extend(names.facts_of(inst_label))
    elif kind == BY_FALLBACK:
        out.extend(names.facts_of(name))
    hostname = _present(rec["f_hostname"])
    if hostname is not None and origin == "label hostname":
        out.append(("host", names.normal_host(hostname)))
    elif hostname is not None:  # the machine's name beside an IP address: links a gateway's name
        out.append(("hostname", names.normal_host(hostname)))
    for kind_, column in (("pod", "f_pod"), ("namespace", "f_namespace"),
                          ("pod_ip", "f_pod_ip"), ("container", "f_container"),
                          ("node", "node_label"), ("job", "f_job")):
        value = _present(rec[column])
        if value is not None:
            out.append((kind_, value))
    return out


def name_label_sets(labels: Sequence[Mapping[str, str]], names: np.ndarray,
                    signals: np.ndarray, spec_label: str, engine: str,
                    present: Iterable[str]) -> tuple[np.ndarray, list[str]]:
    """Instance names of series given as label dicts (the live collector's answers).

    The same naming as the file reader's (``name_instances`` then ``router_rows_to_drop``):
    ``spec_label`` is the spec's instance label ("" for none), ``names``/``signals`` the series
    name and signal per series, ``present`` the labels the answer can carry (a ``sum by``
    keeps only its grouping labels). Returns the instance per series, "" for a series that
    names none or is a router series not read, and the naming notes.
    """
    import pandas as pd

    n = len(labels)
    kept = set(present)
    cache: dict[str, pd.Series] = {}

    def lab(label: str) -> pd.Series:
        if label not in cache:
            values = ([d.get(label) for d in labels] if label in kept else [None] * n)
            cache[label] = pd.Series(values, dtype=object)
        return cache[label]

    frame = pd.DataFrame({"instance_label": np.full(n, spec_label, dtype=object),
                          "engine": np.full(n, engine, dtype=object), "name": names,
                          "signal": signals})
    named, notes = name_instances(frame, lab, "", "no instance label")
    frame = frame.assign(instance=named["instance"].to_numpy(),
                         name_kind=named["name_kind"].to_numpy(),
                         origin=named["origin"].to_numpy())
    drop, drop_notes = router_rows_to_drop(frame)
    insts = np.where(drop, "", named["instance"].fillna("").to_numpy(dtype=object))
    return insts.astype(object), [*notes, *drop_notes]


__all__ = [
    "BY_BACKEND",
    "BY_FALLBACK",
    "BY_LABEL",
    "BY_SPEC",
    "backend_address",
    "instance_keys",
    "labels_read",
    "name_instances",
    "name_label_sets",
    "router_rows_to_drop",
]
