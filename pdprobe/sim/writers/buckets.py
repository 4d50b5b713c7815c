"""Histogram bucket bounds exactly as the engines expose them (docs/inputs/metrics.md).

vLLM 0.33.0 ``vllm/v1/metrics/buckets.py`` and the KV-connector stats modules; SGLang 0.5.23
``metrics_collector.py`` / tokenizer metrics. SGLang's token-length histograms are opt-in
(``--collect-tokens-histogram``) and are not written.
"""

from __future__ import annotations

from typing import Final

VLLM_TTFT: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                    5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0, 20.0, 40.0, 80.0)
VLLM_REQUEST_LATENCY: Final = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                               40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
VLLM_XFER_TIME: Final = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
VLLM_XFER_BYTES: Final = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))  # 2^11 .. 2^33
VLLM_DESCRIPTORS: Final = (10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 400.0, 1000.0, 2000.0,
                           4000.0, 10000.0, 20000.0, 50000.0)

SGLANG_TTFT: Final = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0,
                      80.0, 100.0, 200.0, 400.0)
SGLANG_ITL: Final = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                     0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
SGLANG_E2E: Final = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0,
                     80.0, 100.0, 200.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0)
SGLANG_QUEUE: Final = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0,
                       15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0,
                       400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0,
                       1800.0, 2000.0, 2500.0, 3000.0)
SGLANG_XFER_LATENCY_MS: Final = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
                                 2500.0, 5000.0)
SGLANG_XFER_SPEED_GB_S: Final = (0.1, 0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 400.0)
SGLANG_XFER_TOTAL_MB: Final = (1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0)


def vllm_request_tokens(max_model_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series up to ``max_model_len`` (``build_1_2_5_buckets``)."""
    out: list[float] = []
    mantissas = (1, 2, 5)
    exponent = 0
    while True:
        for m in mantissas:
            value = m * 10**exponent
            if value > max_model_len:
                return tuple(out)
            out.append(float(value))
        exponent += 1


def itl_bounds(engine: str) -> tuple[float, ...]:
    """The inter-token-latency buckets the engine accumulates during the run."""
    return SGLANG_ITL if engine == "sglang" else VLLM_ITL
