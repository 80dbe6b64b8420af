"""The ``corun_`` metrics on SGLang's ``/metrics`` (with ``--enable-metrics``).

Registered in a scheduler process with SGLang's own labels and machinery, as
``sglang.srt.observability.metrics_collector.SchedulerMetricsCollector`` registers its
gauges: prometheus_client imported once SGLang has set ``PROMETHEUS_MULTIPROC_DIR``,
gauges in ``mostrecent`` multiprocess mode, so the server's ``/metrics`` (a
``MultiProcessCollector``) shows the scheduler's last values. The numbers come from
``reservations.Snapshot`` and a ``steps.Tally``; ``adapters`` publishes them whenever SGLang
logs its own scheduler stats, so a step adds nothing to ``/metrics`` but a Python int between two.
Counters (exported with ``_total``) are summed over processes, gauges show the last value.
"""

from __future__ import annotations

from typing import Any

from corun_sglang.core.reservations import Snapshot
from corun_sglang.core.steps import Tally

RESERVED = "corun_kv_reserved_tokens"
USED = "corun_kv_used_tokens"
POOL = "corun_kv_pool_tokens"
WAITING = "corun_requests_waiting_for_kv"
WAITING_ISOLATION = "corun_requests_waiting_for_isolation"
SHARED = "corun_kv_shared_tokens"
CACHED = "corun_kv_cached_tokens"
STOPS = "corun_contract_stops"  # a counter: exported as corun_contract_stops_total
DECODE_STEPS = "corun_decode_steps"  # a counter by graph_size
PADDED_SLOTS = "corun_decode_padded_slots"  # a counter
DECODE_GRAPHS = "corun_decode_graph_info"  # a gauge by graph_size: 1 for each decode graph served
PREFILLS = "corun_prefills"  # a counter by kind (steps.PREFILL_KINDS)

_GAUGES = (
    (RESERVED, "reserved_tokens",
     "KV tokens reserved by full-sequence admission: prompt + max_new_tokens of every admitted, unfinished request."),
    (USED, "used_tokens", "KV tokens written now."),
    (POOL, "pool_tokens", "KV pool size in tokens."),
    (WAITING, "waiting_for_kv",
     "Waiting requests whose whole-sequence reservation does not fit the KV pool beside the admitted ones."),
    (WAITING_ISOLATION, "waiting_for_isolation",
     "Waiting requests that fit the KV pool and a free slot of N, held back only because a prefill runs one "
     "request (or one pack) at a time."),
    (SHARED, "shared_tokens",
     "--corun-prefix-cache: KV tokens of cached prompt prefixes that running requests hold, counted once for all "
     "who share them (not in their reservations)."),
    (CACHED, "cached_tokens",
     "--corun-prefix-cache: KV tokens of cached prompt prefixes no running request holds, evicted when the pool "
     "needs them."),
)


class Metrics:
    """One scheduler's ``corun_`` gauges and counters, under SGLang's labels."""

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
        self._decode_steps = Counter(
            DECODE_STEPS, "Decode steps, by the size of the decode CUDA graph each replayed.",
            labelnames=[*names, "graph_size"], registry=registry,
        )
        self._padded = Counter(
            PADDED_SLOTS, "Padding slots of the decode steps: graph size less the requests decoding, summed.",
            labelnames=names, registry=registry,
        ).labels(**labels)
        self._graphs = Gauge(
            DECODE_GRAPHS, "1 for each decode CUDA graph size served: the verified decode tiers and N.",
            labelnames=[*names, "graph_size"], multiprocess_mode="mostrecent", registry=registry,
        )
        self._prefills = Counter(
            PREFILLS, "Prefill batches by kind: isolated (one fresh whole prompt), packed (several prompts, or "
            "one padded to the prefill pack), chunk (a chunk of a longer prompt).",
            labelnames=[*names, "kind"], registry=registry,
        )
        self._labels = dict(labels)

    def serve_decode_graphs(self, sizes) -> None:
        """Mark each decode graph size served (``corun_decode_graph_info`` 1)."""
        for size in sizes:
            self._graphs.labels(**self._labels, graph_size=str(size)).set(1)

    def publish(self, snapshot: Snapshot) -> None:
        for field, gauge in self._gauges.items():
            gauge.set(getattr(snapshot, field))

    def count(self, tally: Tally) -> None:
        """Add the steps of ``tally`` to the counters."""
        for graph, steps in tally.decode_steps.items():
            self._decode_steps.labels(**self._labels, graph_size=str(graph)).inc(steps)
        if tally.padded_slots:
            self._padded.inc(tally.padded_slots)
        for kind, prefills in tally.prefills.items():
            self._prefills.labels(**self._labels, kind=kind).inc(prefills)

    def count_stop(self) -> None:
        self._stops.inc()
