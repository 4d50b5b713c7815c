"""The live collector's HTTP client, parser and assembly.

Faults are played by a small real HTTP server on 127.0.0.1 that misbehaves on purpose (503 then
OK, 429 with Retry-After, hangs, malformed JSON, warnings, 422 too-many-samples, 401). The
collector against a real Prometheus is tested in tests/live/.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import numpy as np
import pytest

from pdprobe import signals as S
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.prometheus import collect_partial, redact
from pdprobe.collectors.prometheus_client import (
    PromClient,
    PrometheusAuthError,
    PrometheusUnreachable,
    display_url,
    parse_retry_after,
)
from pdprobe.collectors.prometheus_decode import SeriesSet, parse_matrix
from pdprobe.collectors.prometheus_rows import batch_groups, select_and_flatten
from pdprobe.collectors.prometheus_session import discover_names, server_info
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.errors import SourceError, UsageError

TOKEN = "s3cr3t-t0ken-value"


# --------------------------------------------------------------------------------------------
# A misbehaving Prometheus
# --------------------------------------------------------------------------------------------

Reply = tuple[int, dict[str, str], bytes]


@dataclass
class Seen:
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    at: float


@dataclass
class FakeProm:
    url: str
    seen: list[Seen] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def _ok(data: object, **extra: object) -> Reply:
    return 200, {"Content-Type": "application/json"}, json.dumps(
        {"status": "success", "data": data, **extra}).encode()


def _err(status: int, error_type: str, error: str, headers: dict[str, str] | None = None) -> Reply:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(
        {"status": "error", "errorType": error_type, "error": error}).encode()


def _matrix(series: list[tuple[dict[str, str], list[tuple[float, float]]]]) -> dict[str, object]:
    return {"resultType": "matrix", "result": [
        {"metric": m, "values": [[t, repr(float(v))] for t, v in vals]} for m, vals in series]}


@pytest.fixture
def fake() -> Iterator[Callable[[Callable[[Seen, int], Reply | None]], FakeProm]]:
    servers: list[tuple[ThreadingHTTPServer, FakeProm]] = []

    def start(respond: Callable[[Seen, int], Reply | None],
              tls: tuple[str, str] | None = None) -> FakeProm:
        state = FakeProm(url="")
        counter = {"n": 0}
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                parts = urlsplit(self.path)
                params = dict(parse_qsl(parts.query))
                if self.command == "POST":
                    length = int(self.headers.get("Content-Length", "0"))
                    params.update(parse_qsl(self.rfile.read(length).decode()))
                seen = Seen(parts.path, params, {k.lower(): v for k, v in self.headers.items()},
                            time.monotonic())
                with lock:
                    state.seen.append(seen)
                    counter["n"] += 1
                    n = counter["n"]
                reply = respond(seen, n)
                if reply is None:  # hang until the test ends
                    state.stop.wait(30)
                    return
                status, headers, body = reply
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = _handle
            do_POST = _handle

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
            scheme = "https"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        state.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
        servers.append((server, state))
        return state

    yield start
    for server, state in servers:
        state.stop.set()
        server.shutdown()
        server.server_close()


def _client(url: str, timeout: float = 10.0, **kw: object) -> PromClient:
    target = PrometheusTarget(url=url, timeout_s=timeout, **kw)  # type: ignore[arg-type]
    return PromClient(target, time.monotonic() + timeout)


# --------------------------------------------------------------------------------------------
# Retries, deadlines, errors
# --------------------------------------------------------------------------------------------


def test_503_then_ok_is_retried(fake) -> None:
    srv = fake(lambda seen, n: _err(503, "unavailable", "overloaded") if n <= 2 else
               _ok({"resultType": "scalar", "result": [100.0, "100"]}))
    client = _client(srv.url)
    out = client.query("time()")
    assert out[0]["value"][1] == "100"
    assert len(srv.seen) == 3
    assert client.records[-1].attempts == 3


def test_429_honours_retry_after(fake) -> None:
    srv = fake(lambda seen, n: _err(429, "", "slow down", {"Retry-After": "1"}) if n == 1 else
               _ok({"resultType": "scalar", "result": [1.0, "1"]}))
    client = _client(srv.url)
    client.query("time()")
    assert len(srv.seen) == 2
    assert srv.seen[1].at - srv.seen[0].at >= 0.95  # waited as told, not the 0.25 s backoff


def test_retry_after_beyond_budget_fails_at_once(fake) -> None:
    srv = fake(lambda seen, n: _err(429, "", "slow down", {"Retry-After": "120"}))
    client = _client(srv.url, timeout=5.0)
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=r"HTTP 429; it asked to retry after 120 s"):
        client.query("time()")
    assert time.monotonic() - t0 < 1.0
    assert len(srv.seen) == 1


def test_400_is_not_retried(fake) -> None:
    srv = fake(lambda seen, n: _err(400, "bad_data", "parse error at char 3"))
    client = _client(srv.url)
    with pytest.raises(Exception, match="parse error") as info:
        client.query("sum(")
    assert not isinstance(info.value, SourceError)  # a query problem, handled by the caller
    assert len(srv.seen) == 1


def test_hang_ends_within_the_budget(fake) -> None:
    srv = fake(lambda seen, n: None)
    target = PrometheusTarget(url=srv.url, timeout_s=1.5, until_ts=1_796_000_000.0)
    t0 = time.monotonic()
    with pytest.raises(PrometheusUnreachable, match=r"did not answer .* within the 1.5 s budget"):
        collect_partial(target)
    assert time.monotonic() - t0 < 3.0


def test_connection_refused_is_one_clear_line() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = PrometheusTarget(url=f"http://127.0.0.1:{port}", timeout_s=3.0)
    with pytest.raises(PrometheusUnreachable) as info:
        collect_partial(target)
    line = info.value.one_line()
    assert "cannot reach Prometheus at http://127.0.0.1:" in line and "connection refused" in line
    assert "\n" not in line


def test_malformed_json_is_a_source_error(fake) -> None:
    srv = fake(lambda seen, n: (200, {"Content-Type": "text/html"}, b"<html>login page</html>"))
    with pytest.raises(SourceError, match=r"not JSON .*login page"):
        server_info(_client(srv.url))


def test_404_names_the_base_url_problem(fake) -> None:
    srv = fake(lambda seen, n: (404, {}, b"404 page not found"))
    with pytest.raises(SourceError, match=r"no Prometheus query API at .* \(HTTP 404"):
        server_info(_client(srv.url))


def test_warnings_in_responses_are_surfaced(fake) -> None:
    srv = fake(lambda seen, n: _ok({"resultType": "scalar", "result": [5.0, "5"]},
                                   warnings=["PromQL info: partial response from store 3"]))
    client = _client(srv.url)
    client.query("time()")
    assert client.warnings == ["Prometheus warned: PromQL info: partial response from store 3"]


def test_victoriametrics_partial_flag_is_a_warning(fake) -> None:
    srv = fake(lambda seen, n: _ok(_matrix([({"__name__": "x"}, [(0.0, 1.0)])]), isPartial=True))
    client = _client(srv.url)
    assert client.query_range("x", 0.0, 0.0, 15.0).values.tolist() == [1.0]
    assert any("partial response (isPartial)" in w for w in client.warnings)


def test_too_many_samples_splits_the_range(fake) -> None:
    def respond(seen: Seen, n: int) -> Reply:
        start, end = float(seen.params["start"]), float(seen.params["end"])
        if end - start > 50:
            return _err(422, "execution", "query processing would load too many samples into "
                                          "memory in query execution")
        pts = [(t, t * 2) for t in np.arange(start, end + 1, 10.0)]
        return _ok(_matrix([({"__name__": "x", "instance": "a"}, pts)]))

    srv = fake(respond)
    client = _client(srv.url)
    sset = client.query_range("x", 0.0, 100.0, 10.0)
    assert sset.ts.tolist() == [float(t) for t in range(0, 101, 10)]
    assert sset.values.tolist() == [2.0 * t for t in range(0, 101, 10)]
    ranges = sorted((float(s.params["start"]), float(s.params["end"])) for s in srv.seen)
    assert (0.0, 100.0) in ranges and (0.0, 50.0) in ranges and (60.0, 100.0) in ranges


def test_too_many_samples_everywhere_gives_up_with_a_step_hint(fake) -> None:
    srv = fake(lambda seen, n: _err(422, "execution", "query processing would load too many "
                                                      "samples into memory"))
    client = _client(srv.url)
    from pdprobe.collectors.prometheus_decode import TooLarge

    with pytest.raises(TooLarge):
        client.query_range("x", 0.0, 1000.0, 10.0)
    # Halved three times (the first piece of each split is refused again): bounded, then the
    # caller coarsens the step.
    spans = [float(x.params["end"]) - float(x.params["start"]) for x in srv.seen]
    assert spans == [1000.0, 500.0, 250.0, 120.0]


def test_long_ranges_are_chunked_below_11000_points(fake) -> None:
    srv = fake(lambda seen, n: _ok(_matrix([])))
    _client(srv.url).query_range("x", 0.0, 30_000 * 15.0, 15.0)
    counts = [round((float(s.params["end"]) - float(s.params["start"])) / 15) + 1 for s in srv.seen]
    assert sum(counts) == 30_001 and max(counts) <= pp.MAX_POINTS_PER_SERIES


def test_label_values_endpoint_refused_falls_back_to_a_query(fake) -> None:
    def respond(seen: Seen, n: int) -> Reply:
        if "/label/" in seen.path:
            return 404, {}, b""
        return _ok(_matrix([({"__name__": "vllm:num_requests_running"}, [(0.0, 1.0)]),
                            ({"__name__": "node_infiniband_state_id"}, [(0.0, 1.0)])]))

    srv = fake(respond)
    window = pp.choose_window(600.0, 10_000.0)
    names, how = discover_names(_client(srv.url), window, "{a}", "{b}")
    assert names == ["node_infiniband_state_id", "vllm:num_requests_running"]
    assert how.startswith("group by (__name__)")
    assert [s.params["query"] for s in srv.seen[1:]] == ["group by (__name__) ({a})",
                                                          "group by (__name__) ({b})"]


# --------------------------------------------------------------------------------------------
# Credentials
# --------------------------------------------------------------------------------------------


def test_credentials_are_sent_and_never_shown(fake) -> None:
    srv = fake(lambda seen, n: _err(401, "", f"invalid token {TOKEN}"))
    client = _client(srv.url, bearer_token=TOKEN, headers=(("X-Scope-OrgID", "tenant-7"),))
    with pytest.raises(PrometheusAuthError) as info:
        client.query("time()")
    assert srv.seen[0].headers["authorization"] == f"Bearer {TOKEN}"
    assert srv.seen[0].headers["x-scope-orgid"] == "tenant-7"
    assert TOKEN not in info.value.one_line() and "tenant-7" not in info.value.one_line()
    assert "refused the credentials (HTTP 401)" in info.value.one_line()


def test_basic_auth_and_url_userinfo_are_redacted(fake) -> None:
    srv = fake(lambda seen, n: _err(503, "", "down for user admin with pw hunter2"))
    url = srv.url.replace("http://", "http://admin:hunter2@")
    client = _client(url, timeout=2.0, basic_auth_user="bob", basic_auth_password="pa55word")
    with pytest.raises(SourceError) as info:
        client.query("time()")
    assert srv.seen[0].headers["authorization"].startswith("Basic ")
    line = info.value.one_line()
    assert "hunter2" not in line and "pa55word" not in line and "admin:" not in line
    assert display_url(url) == srv.url


def test_redact_replaces_longest_first() -> None:
    assert redact("tok=abcdef and abcd", ("abcd", "abcdef")) == "tok=*** and ***"
    # A short secret (a tenant id) is replaced as a whole word only.
    assert redact("tenant a7 refused; data7 ok", ("a7",)) == "tenant *** refused; data7 ok"


def test_retry_after_http_date() -> None:
    from email.utils import formatdate

    assert 8 <= (parse_retry_after(formatdate(time.time() + 10, usegmt=True)) or 0) <= 10
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("soon") is None


def test_clock_skew_warns_and_the_window_follows_the_server(fake) -> None:
    from pdprobe.collectors.base import ReadContext
    from pdprobe.collectors.prometheus_session import Session

    server_now = time.time() - 100.0  # the server's clock is 100 s behind ours

    def respond(seen: Seen, n: int) -> Reply:
        if seen.path == "/api/v1/query":
            return _ok({"resultType": "scalar", "result": [server_now, str(server_now)]})
        if "/label/" in seen.path:
            return _ok(["vllm:num_requests_running"])
        return 404, {}, b""

    srv = fake(respond)
    target = PrometheusTarget(url=srv.url, since_s=600.0, until_ts=time.time(), timeout_s=5.0)
    session = Session(target, ReadContext())
    try:
        _info, window, families, _how = session.prepare()
    finally:
        session.close()
    assert any("clock is 100 s behind this machine's" in w for w in session.warnings)
    assert any("window end moved" in n for n in session.notes)
    assert window.end_ts == pytest.approx(server_now, abs=1.0)
    assert [f.exposed for f in families] == ["vllm:num_requests_running"]
    label_call = next(s for s in srv.seen if "/label/" in s.path)
    assert float(label_call.params["end"]) == pytest.approx(server_now, abs=1.0)


@pytest.fixture(scope="module")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    root = tmp_path_factory.mktemp("tls")
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


def test_tls_needs_the_ca_bundle_or_insecure(fake, tls_cert: tuple[str, str]) -> None:
    srv = fake(lambda seen, n: _ok({"resultType": "scalar", "result": [1.0, "1"]}), tls=tls_cert)
    assert srv.url.startswith("https://")
    with pytest.raises(PrometheusUnreachable, match=r"TLS connection to https://.* failed "
                                                    r"\(certificate verification failed\)"):
        _client(srv.url, timeout=5.0).query("time()")
    assert _client(srv.url, ca_bundle=tls_cert[0]).query("time()")[0]["value"][1] == "1"
    assert _client(srv.url, insecure=True).query("time()")[0]["value"][1] == "1"
    with pytest.raises(UsageError, match=r"--ca-bundle .*: no such file"):
        _client(srv.url, ca_bundle=tls_cert[0] + ".missing")


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def test_fast_parser_matches_json_and_handles_specials() -> None:
    series = [({"__name__": "x", "instance": "a:1"}, [(10.0, 1.5), (20.0, float("nan"))]),
              ({"__name__": "x", "instance": "b:1"}, [(10.0, float("inf")), (30.0, -2.0)])]
    body = json.dumps({"status": "success", "data": {
        "resultType": "matrix", "result": [
            {"metric": m, "values": [[t, {"nan": "NaN", "inf": "+Inf"}.get(repr(v), repr(v))]
                                     for t, v in vals]} for m, vals in series]}},
        separators=(",", ":")).encode()
    sset, env = parse_matrix(body, 10.0, 10.0, "test")
    assert env["status"] == "success"
    assert [lab["instance"] for lab in sset.labels] == ["a:1", "b:1"]
    assert sset.offsets.tolist() == [0, 2, 4]
    assert sset.ts.tolist() == [10.0, 20.0, 10.0, 30.0]
    assert np.isnan(sset.values[1]) and np.isposinf(sset.values[2]) and sset.values[3] == -2.0


def test_parser_falls_back_when_label_values_hold_braces() -> None:
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "x", "pod": 'we{ird},"values":[]}'}, "values": [[1, "2"]]}]}},
        separators=(",", ":")).encode()
    sset, _ = parse_matrix(body, 1.0, 1.0, "test")
    assert sset.labels[0]["pod"] == 'we{ird},"values":[]}'
    assert sset.values.tolist() == [2.0]


@pytest.mark.parametrize("result", [
    [],
    [{"metric": {"a": "1"}, "values": []}, {"metric": {"a": "2"}, "values": [[1, "5"]]}],
    [{"metric": {"a": "1"}, "values": [[1, "5"]]}, {"metric": {}, "values": []}],
    [{"metric": {"a": "1"}, "values": [[1, "5"]], "histograms": [[2, {"count": "1"}]]}],
    [{"metric": {"a": "]]}]"}, "values": [[1.5, "1e3"], [2.5, "-Inf"]]},
     {"metric": {"b": "x"}, "values": [[3, "NaN"]]}],
])
def test_fast_parser_and_json_agree_on_odd_answers(result: list[dict[str, object]]) -> None:
    """Empty series, label values that look like structure, native histograms: whatever path
    is taken, the series are those ``json`` reads."""
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result},
                       "warnings": ["a ]]}] warning"]}, separators=(",", ":")).encode()
    sset, env = parse_matrix(body, 0.0, 1.0, "test")
    assert env["warnings"] == ["a ]]}] warning"]
    assert sset.labels == [r["metric"] for r in result]
    pairs = [(float(t), float(v)) for r in result for t, v in r["values"]]  # type: ignore[attr-defined]
    assert sset.ts.tolist() == [t for t, _ in pairs]
    np.testing.assert_array_equal(sset.values, [v for _, v in pairs])
    counts = [len(r["values"]) for r in result]  # type: ignore[arg-type]
    assert sset.offsets.tolist() == np.concatenate(([0], np.cumsum(counts))).tolist()


def test_fast_parser_reads_well_formed_answers_itself() -> None:
    from pdprobe.collectors.prometheus_decode import _fast_matrix

    result = [{"metric": {"__name__": "x", "instance": f"h{i}:1"},
               "values": [[t, str(t * i)] for t in range(i)]} for i in range(4)]

    def body(**extra: object) -> bytes:
        return json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                         "result": result}, **extra},
                          separators=(",", ":")).encode()

    plain = body()
    parsed = _fast_matrix(plain, plain.find(b'"result":[') + 10, 0.0, 1.0, "test")
    assert parsed is not None
    assert parsed[0].offsets.tolist() == [0, 0, 1, 3, 6]
    assert parsed[0].values.tolist() == [0.0, 0.0, 2.0, 0.0, 3.0, 6.0]
    # A warning holding the array's closing characters is left to json (same answer).
    odd = body(warnings=["a ]]}] warning"])
    assert _fast_matrix(odd, odd.find(b'"result":[') + 10, 0.0, 1.0, "test") is None
    assert parse_matrix(odd, 0.0, 1.0, "test")[0].values.tolist() == parsed[0].values.tolist()


# --------------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------------


def _sset(series: list[tuple[dict[str, str], list[float]]], start: float = 0.0,
          step: float = 15.0) -> SeriesSet:
    labels, ts, vals, counts = [], [], [], []
    for lab, values in series:
        labels.append(lab)
        pts = [(start + i * step, v) for i, v in enumerate(values) if not np.isnan(v)]
        ts.extend(t for t, _ in pts)
        vals.extend(v for _, v in pts)
        counts.append(len(pts))
    return SeriesSet(labels, np.asarray(ts), np.asarray(vals),
                     np.concatenate(([0], np.cumsum(counts))).astype(np.int64), start, step)


def _batch(names: list[str], kind: str = "counter", window: pp.Window | None = None,
           label_filter: tuple[tuple[str, str], ...] = ()) -> pp.Batch:
    fams = pp.families_from_names(names, pp.SpecIndex.build())
    w = window or pp.choose_window(60.0, 60.0)
    batches = [b for b in pp.plan_batches(fams, w)
               if b.kind == kind and b.label_filter == label_filter]
    assert len(batches) == 1
    return batches[0]


def test_counter_reset_and_sub_series_are_corrected_and_summed() -> None:
    b = _batch(["vllm:request_success_total"])
    nan = float("nan")
    # Raw sub-series of one instance (as re-read after a restart): engine 1 restarts alone,
    # engine 2 appears in the middle of the window.
    sset = _sset([
        ({"__name__": "vllm:request_success_total", "instance": "d:1", "engine": "0"},
         [100, 110, 120, 130, 140]),
        ({"__name__": "vllm:request_success_total", "instance": "d:1", "engine": "1"},
         [50, 60, 5, 15, 20]),
        ({"__name__": "vllm:request_success_total", "instance": "d:1", "engine": "2"},
         [nan, nan, 1, 1, 3]),
    ])
    g = batch_groups(b, sset)
    assert g is not None and g.reset_idents == {"d:1"}
    metrics, _, _ = select_and_flatten([g])
    assert metrics["signal"].unique().tolist() == [S.REQUESTS_FINISHED_TOTAL]
    # 150, +10+10, +10+5(reset)+1(new), +10+10+0, +10+5+2
    assert metrics["value"].tolist() == [150, 170, 186, 206, 223]


def test_filtered_specs_get_their_own_server_side_batch() -> None:
    b = _batch(["vllm:request_success_total"], label_filter=(("finished_reason", "abort|error"),))
    assert 'finished_reason=~"abort|error"' in b.promql("")
    assert b.promql("").startswith("sum by (__name__, instance, server, worker_addr, worker) (")
    sset = _sset([({"__name__": "vllm:request_success_total", "instance": "d:1"}, [1, 1, 3])])
    metrics, _, _ = select_and_flatten([batch_groups(b, sset)])
    assert metrics["signal"].unique().tolist() == [S.REQUESTS_FAILED_TOTAL]
    assert metrics["value"].tolist() == [1, 1, 3]


def test_32_bit_wrap_is_unwrapped_on_network_counters() -> None:
    b = _batch(["node_infiniband_out_of_sequence_packets_received_total"])
    u32 = 2.0**32
    sset = _sset([({"__name__": "node_infiniband_out_of_sequence_packets_received_total",
                    "instance": "10.0.0.1:9100", "device": "mlx5_0", "port": "1"},
                   [u32 - 100, u32 - 10, 40, 90])])
    g = batch_groups(b, sset)
    _, network, _ = select_and_flatten([g])
    assert network["node"].unique().tolist() == ["10.0.0.1"]
    assert (network["value"] - network["value"].iloc[0]).tolist() == [0, 90, 140, 190]


def test_gauges_use_the_spec_aggregation() -> None:
    b = _batch(["vllm:num_requests_running", "vllm:num_requests_waiting"], "gauge")
    sset = _sset([
        ({"__name__": "vllm:num_requests_waiting", "instance": "d:1"}, [2, 3]),
        ({"__name__": "vllm:num_requests_running", "instance": "d:1"}, [4, float("nan")]),
    ])
    metrics, _, _ = select_and_flatten([batch_groups(b, sset)])
    assert metrics[metrics["signal"] == S.REQUESTS_WAITING]["value"].tolist() == [2, 3]
    running = metrics[metrics["signal"] == S.REQUESTS_RUNNING]
    assert running["ts"].tolist() == [0.0]  # absent at 15 s: no row, never a 0
    mean = _batch(["vllm:kv_cache_usage_perc"], "gauge")
    assert mean.aggregate == "mean" and mean.promql("").startswith("avg by (__name__, instance, server, worker_addr, worker)")
    raw = _sset([({"__name__": "vllm:kv_cache_usage_perc", "instance": "d:1", "engine": "0"},
                  [0.2, 0.4]),
                 ({"__name__": "vllm:kv_cache_usage_perc", "instance": "d:1", "engine": "1"},
                  [0.6, float("nan")])])
    m2, _, _ = select_and_flatten([batch_groups(mean, raw)])
    assert m2["value"].tolist() == pytest.approx([0.4, 0.4])


def test_newer_name_wins_when_an_instance_exposes_both() -> None:
    fams = pp.families_from_names(["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"],
                                  pp.SpecIndex.build())
    (b,) = pp.plan_batches(fams, pp.choose_window(60.0, 60.0))
    sset = _sset([({"__name__": "vllm:gpu_cache_usage_perc", "instance": "a"}, [0.9, 0.9]),
                  ({"__name__": "vllm:kv_cache_usage_perc", "instance": "a"}, [0.5, 0.6]),
                  ({"__name__": "vllm:gpu_cache_usage_perc", "instance": "old"}, [0.3, 0.3])])
    metrics, _, _ = select_and_flatten([batch_groups(b, sset)])
    by = metrics.groupby("instance")["value"].apply(list).to_dict()
    assert by == {"a": [0.5, 0.6], "old": [0.3, 0.3]}  # no double rows; old-only instance kept


def test_engine_metrics_win_over_dynamo_for_the_same_instance() -> None:
    fams = pp.families_from_names(["vllm:num_requests_running", "dynamo_component_inflight_requests"],
                                  pp.SpecIndex.build())
    batches = pp.plan_batches(fams, pp.choose_window(60.0, 60.0))
    groups = []
    for b in batches:
        name = b.families[0].exposed
        groups.append(batch_groups(b, _sset([({"__name__": name, "instance": "w:1"},
                                               [5, 6] if name.startswith("vllm") else [50, 60])])))
    metrics, _, _ = select_and_flatten(groups)
    assert metrics["value"].tolist() == [5, 6]


def test_histogram_rows_scale_le_and_sum() -> None:
    fams = pp.families_from_names(["sglang:kv_transfer_latency_ms_bucket",
                                   "sglang:kv_transfer_latency_ms_sum",
                                   "sglang:kv_transfer_latency_ms_count"], pp.SpecIndex.build())
    (b,) = pp.plan_batches(fams, pp.choose_window(60.0, 60.0))
    name = "sglang:kv_transfer_latency_ms"
    sset = _sset([({"__name__": f"{name}_bucket", "instance": "p", "le": "10.0"}, [1, 3]),
                  ({"__name__": f"{name}_bucket", "instance": "p", "le": "+Inf"}, [2, 5]),
                  ({"__name__": f"{name}_sum", "instance": "p"}, [15, 45]),
                  ({"__name__": f"{name}_count", "instance": "p"}, [2, 5])], step=b.step_s)
    metrics, _, _ = select_and_flatten([batch_groups(b, sset)])
    buckets = metrics[metrics["kind"] == S.BUCKET]
    assert sorted(buckets["le"].unique().tolist()) == [0.01, float("inf")]
    assert metrics[metrics["kind"] == S.HSUM]["value"].tolist() == pytest.approx([0.015, 0.045])
    assert metrics[metrics["kind"] == S.HCOUNT]["value"].tolist() == [2, 5]


def test_gaps_and_stale_data_are_warned() -> None:
    import pandas as pd

    from pdprobe.collectors.prometheus import _gap_warnings

    w = pp.choose_window(900.0, 1900.0)  # 15 s steps from 1000 to 1900
    ts_a = np.arange(1000.0, 1601.0, 15.0)  # stops 300 s before the end
    ts_b = np.concatenate([np.arange(1000.0, 1301.0, 15.0), np.arange(1420.0, 1601.0, 15.0)])
    metrics = pd.DataFrame({
        "ts": np.concatenate([ts_a, ts_b]), "instance": ["a"] * len(ts_a) + ["b"] * len(ts_b),
        "signal": "requests_running", "kind": "gauge", "le": np.nan, "value": 1.0})
    warnings = _gap_warnings(metrics, w)
    assert warnings[0].startswith("1 instance(s) have no samples for a stretch")
    assert "b (105 s)" in warnings[0]
    assert "the newest sample is 5 min before the window end" in warnings[1]
