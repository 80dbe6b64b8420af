"""The ``corun_`` metrics on SGLang's ``/metrics`` (with ``--enable-metrics``).

Registered in a scheduler process with SGLang's own labels and machinery, as
``sglang.srt.observability.metrics_collector.SchedulerMetricsCollector`` registers its
gauges: prometheus_client imported once SGLang has set ``PROMETHEUS_MULTIPROC_DIR``,
gauges in ``mostrecent`` multiprocess mode, so the server's ``/metrics`` (a
``MultiProcessCollector``) shows the scheduler's last values. The numbers come from
``reservations.Snapshot``; ``adapters`` publishes one whenever SGLang logs its own
scheduler stats.
"""

from __future__ import annotations

from typing import Any

from corun_sglang.reservations import Snapshot

RESERVED = "corun_kv_reserved_tokens"
USED = "corun_kv_used_tokens"
POOL = "corun_kv_pool_tokens"
WAITING = "corun_requests_waiting_for_kv"
STOPS = "corun_contract_stops"  # a counter: exported as corun_contract_stops_total

_GAUGES = (
    (RESERVED, "reserved_tokens",
     "KV tokens reserved by full-sequence admission: prompt + max_new_tokens of every admitted, unfinished request."),
    (USED, "used_tokens", "KV tokens written now."),
    (POOL, "pool_tokens", "KV pool size in tokens."),
    (WAITING, "waiting_for_kv",
     "Waiting requests whose whole-sequence reservation does not fit the KV pool beside the admitted ones."),
)


class Metrics:
    """One scheduler's ``corun_`` gauges and contract-stop counter, under SGLang's labels."""

    def __init__(self, labels: dict[str, Any], registry=None):
        from prometheus_client import REGISTRY, Counter, Gauge

        registry = REGISTRY if registry is None else registry
        names = list(labels)
        self._gauges = {
            field: Gauge(name, doc, labelnames=names, multiprocess_mode="mostrecent", registry=registry).labels(**labels)
            for name, field, doc in _GAUGES
        }
        self._stops = Counter(
            STOPS, "Contract stops: a --corun scheduler stopped the server rather than break the contract.",
            labelnames=names, registry=registry,
        ).labels(**labels)

    def publish(self, snapshot: Snapshot) -> None:
        for field, gauge in self._gauges.items():
            gauge.set(getattr(snapshot, field))

    def count_stop(self) -> None:
        self._stops.inc()
