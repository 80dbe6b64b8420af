"""``metrics``: the corun_ gauges and counters, as prometheus_client and SGLang's /metrics read them."""

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry

from corun_sglang.core import steps
from corun_sglang.serving import metrics
from corun_sglang.core.reservations import Snapshot

# SGLang's scheduler labels (SchedulerMetricsCollector.init_new), as a collector holds them
LABELS = {"model_name": "m", "engine_type": "unified", "tp_rank": 0, "pp_rank": 0, "moe_ep_rank": 0}
SAMPLE_LABELS = {k: str(v) for k, v in LABELS.items()}
ROOT = Path(__file__).resolve().parents[2]


def _values(registry) -> dict:
    names = (metrics.RESERVED, metrics.USED, metrics.POOL, metrics.WAITING, metrics.WAITING_ISOLATION,
             metrics.STOPS + "_total", metrics.PADDED_SLOTS + "_total")
    return {name: registry.get_sample_value(name, SAMPLE_LABELS) for name in names}


def _labelled(registry, name, label, value):
    return registry.get_sample_value(name, {**SAMPLE_LABELS, label: value})


def test_gauges_hold_the_last_snapshot_and_the_counter_counts_stops():
    registry = CollectorRegistry()
    m = metrics.Metrics(LABELS, registry=registry)
    m.publish(Snapshot(reserved_tokens=81_918, used_tokens=1_234, pool_tokens=104_000, waiting_for_kv=254,
                       waiting_for_isolation=2))
    m.publish(Snapshot(reserved_tokens=40_959, used_tokens=600, pool_tokens=104_000, waiting_for_kv=3,
                       waiting_for_isolation=1))
    assert _values(registry) == {metrics.RESERVED: 40_959, metrics.USED: 600, metrics.POOL: 104_000,
                                 metrics.WAITING: 3, metrics.WAITING_ISOLATION: 1, "corun_contract_stops_total": 0,
                                 "corun_decode_padded_slots_total": 0}
    m.count_stop()
    assert _values(registry)["corun_contract_stops_total"] == 1


def test_step_counters_add_up_every_tally_by_label():
    registry = CollectorRegistry()
    m = metrics.Metrics(LABELS, registry=registry)
    m.serve_decode_graphs([64, 256])
    for batches, kinds in (([1, 64, 200], [steps.ISOLATED]), ([256, 3], [steps.CHUNK, steps.CHUNK])):
        tally = steps.Tally()
        for b in batches:
            tally.decode(b, [64, 256])
        for kind in kinds:
            tally.prefill(kind)
        m.count(tally)
    steps_total = metrics.DECODE_STEPS + "_total"
    assert _labelled(registry, steps_total, "graph_size", "64") == 3
    assert _labelled(registry, steps_total, "graph_size", "256") == 2
    assert _values(registry)["corun_decode_padded_slots_total"] == 63 + 0 + 56 + 0 + 61
    assert [_labelled(registry, metrics.PREFILLS + "_total", "kind", k) for k in steps.PREFILL_KINDS] == [1, None, 2]
    assert [_labelled(registry, metrics.DECODE_GRAPHS, "graph_size", s) for s in ("64", "128", "256")] == [1, None, 1]


def test_every_name_is_corun_prefixed():
    names = (metrics.RESERVED, metrics.USED, metrics.POOL, metrics.WAITING, metrics.WAITING_ISOLATION, metrics.STOPS,
             metrics.DECODE_STEPS, metrics.PADDED_SLOTS, metrics.DECODE_GRAPHS, metrics.PREFILLS)
    assert all(name.startswith("corun_") for name in names)


_SCHEDULER = """
import sys
from corun_sglang.core import steps
from corun_sglang.serving import metrics
from corun_sglang.core.reservations import Snapshot
m = metrics.Metrics({labels!r})
m.publish(Snapshot(reserved_tokens=81_918, used_tokens=1_234, pool_tokens=104_000, waiting_for_kv=254,
                   waiting_for_isolation=2))
m.count_stop()
m.serve_decode_graphs([8, 16])
tally = steps.Tally()
tally.decode(5, [8, 16])
tally.prefill(steps.PACKED)
m.count(tally)
"""


def test_a_scheduler_process_values_reach_sglangs_multiprocess_metrics(tmp_path):
    """A scheduler process registers in the default registry with PROMETHEUS_MULTIPROC_DIR set, as SGLang's
    collector does; the server's /metrics collects that folder (``add_prometheus_middleware``)."""
    from prometheus_client import multiprocess

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", _SCHEDULER.format(labels=LABELS)], env=env, check=True, timeout=120)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    assert _values(registry) == {metrics.RESERVED: 81_918, metrics.USED: 1_234, metrics.POOL: 104_000,
                                 metrics.WAITING: 254, metrics.WAITING_ISOLATION: 2, "corun_contract_stops_total": 1,
                                 "corun_decode_padded_slots_total": 3}
    assert _labelled(registry, metrics.DECODE_STEPS + "_total", "graph_size", "8") == 1
    assert _labelled(registry, metrics.PREFILLS + "_total", "kind", steps.PACKED) == 1
    assert _labelled(registry, metrics.DECODE_GRAPHS, "graph_size", "16") == 1
