"""Labels that say who a series is about: role, instance, deployment, pod, namespace, backend.

The label names (and role values) the collectors read to attribute a series to an instance, a
role and a deployment, and the routers' re-exports of engine names about one backend
(``ROUTER_SERIES``). ``metric_catalog`` re-exports everything here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pdprobe.collectors.metric_spec import normalise_name

# Labels that name an instance's role (checked in this order) and the values they take.
ROLE_LABELS: Final = ("role", "engine_type", "worker_type", "disaggregation_mode",
                      "dynamo_component", "component")
PREFILL_VALUES: Final = frozenset({"prefill", "p", "producer", "kv_producer", "context", "ctx"})
DECODE_VALUES: Final = frozenset({"decode", "d", "consumer", "kv_consumer", "generation", "gen"})
# Labels that name an instance (first present wins) when the spec does not say otherwise and
# no backend label (below) carries an address. `kubernetes_pod_name` is the pod label of
# Prometheus' own example Kubernetes scrape config.
INSTANCE_LABELS: Final = ("instance", "pod", "pod_name", "kubernetes_pod_name", "worker_id",
                          "hostname", "job")
# Engines whose `worker_id` label is a rank inside one engine (LMCache: the TP rank), not an
# instance: it never names one.
RANK_WORKER_ID_ENGINES: Final = frozenset({"lmcache"})
# Labels that name the deployment of a deployment-scope series (first present wins): Dynamo's
# namespace, then the Kubernetes namespace Prometheus adds; none: "" (one deployment per input).
DEPLOYMENT_LABELS: Final = ("dynamo_namespace", "namespace", "kubernetes_namespace")
# Of those, the ones whose value is a Kubernetes pod name (two namespaces may reuse one).
POD_LABELS: Final = ("pod", "pod_name", "kubernetes_pod_name")
# Labels giving the namespace of `pod` (kube-prometheus; Prometheus' example config).
NAMESPACE_LABELS: Final = ("namespace", "kubernetes_namespace")


@dataclass(frozen=True)
class BackendLabel:
    """A label by which a router or gateway says which engine (backend) a series is about.

    A router's ``/metrics`` carries one series per backend; Prometheus adds the router's own
    ``instance``. A series with one of these labels whose value is an address or URL belongs to
    the backend the label names, never to the router (``pdprobe/collectors/metric_names.py``).
    """

    label: str
    writer: str  # who writes it
    upstream: str  # the file that writes it, for the docs and tests


BACKEND_LABELS: Final = (
    BackendLabel("server", "vLLM production-stack router (server=\"http://<pod ip>:<port>\")",
                 "vllm-project/production-stack src/vllm_router/services/metrics_service/"
                 "__init__.py, src/vllm_router/routers/metrics_router.py"),
    BackendLabel("worker_addr", "SGLang model gateway /engine_metrics (each engine's /metrics "
                 "with worker_addr=\"<worker url>\" added)",
                 "lightseekorg/smg model_gateway/src/core/worker_manager.rs (get_engine_metrics),"
                 " model_gateway/src/core/metrics_aggregator.rs"),
    BackendLabel("worker", "SGLang router (sgl_router_worker_load{worker}, ...) and SGLang "
                 "model gateway (smg_worker_requests_active{worker}, ...)",
                 "sgl-project/sglang sgl-router/src/metrics.rs; lightseekorg/smg "
                 "docs/reference/metrics.md"),
    BackendLabel("worker_url", "SGLang router forks (sgl_router_worker_requests_total"
                 "{worker_url})", ""),
    BackendLabel("endpoint", "generic proxies (prometheus-operator's endpoint= is a port name "
                 "and is not an address, so it never matches)", ""),
    BackendLabel("backend", "generic proxies", ""),
    BackendLabel("upstream", "generic proxies", ""),
)
BACKEND_LABEL_NAMES: Final = tuple(b.label for b in BACKEND_LABELS)


@dataclass(frozen=True)
class RouterSeries:
    """A router's re-export, under an engine metric name, of a number about one backend."""

    name: str  # exposed name (an engine's name from the specs above)
    label: str  # the backend label it carries
    read: bool  # True: the engine's own number, read into the backend's signal
    why: str


# production-stack's router re-exports five vLLM names with `server=` (metrics_router.py).
# Only the two counters it copies from the engine's own /metrics are the engine's numbers.
# Everything carrying SGLang's gateway `worker_addr=` is the engine's exposition passed through
# verbatim and is read as the engine's.
ROUTER_SERIES: Final = (
    RouterSeries("vllm:num_requests_running", "server", False,
                 "the router's count of requests it has in flight to the backend (prefill + "
                 "decoding in its request stats), not the engine's scheduler gauge"),
    RouterSeries("vllm:num_requests_waiting", "server", False,
                 "declared by the router but never set; it would be the router's number"),
    RouterSeries("vllm:gpu_prefix_cache_hit_rate", "server", False,
                 "copied from a V0-only engine gauge; the router writes 0 when the engine does "
                 "not expose it, which would read as a real 0% hit rate"),
    RouterSeries("vllm:gpu_prefix_cache_hits_total", "server", True,
                 "copied from the engine's own counter by the router's engine_stats scraper "
                 "(exported as a gauge, cumulative)"),
    RouterSeries("vllm:gpu_prefix_cache_queries_total", "server", True,
                 "copied from the engine's own counter by the router's engine_stats scraper "
                 "(exported as a gauge, cumulative)"),
    RouterSeries("vllm:num_requests_swapped", "server", False,
                 "the router's own request stats (num_swapped_requests), not the V0 engine "
                 "gauge of the same name"),
)
# (catalog key, backend label) of router series that are the router's own view: not read.
ROUTER_OWN_VIEW: Final = frozenset((normalise_name(r.name), r.label) for r in ROUTER_SERIES
                                   if not r.read)
