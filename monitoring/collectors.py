"""What the metrics scrape reads at scrape time rather than counting as calls run: values that are
the same for every process (and every machine), so per-process bookkeeping could only get them wrong.

- Holds: one aggregate query over the open holds (billing.selectors.holds_open_totals). Counting
  reservations in each worker would miss what a dead worker left open, and the holds voided by
  release_stale_holds in another process.
- Circuits: read from the cache that is the circuit breaker's state (Redis, shared by every
  process), one MGET for every enabled upstream. A gauge set by the workers (multiprocess "livemax")
  would only say what the last worker to touch an upstream saw: a circuit turns half-open when its
  cooldown ends, with no call to set anything, and a worker that sends no call to an upstream would
  keep reporting the state it last saw.

Both are the same on every machine: aggregate them across instances with max(), not sum().
Either failing (database or cache unreachable) leaves its metrics out of the scrape and logs why; the
rest of the scrape is still answered.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

from billing.models import Hold
from billing.selectors import holds_open_totals
from upstreams.circuit import circuit_states
from upstreams.selectors import upstream_names_enabled

logger = logging.getLogger("gateway.metrics")

CIRCUIT_VALUES = {"closed": 0, "open": 1, "half-open": 2}


class HoldsCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        try:
            totals = {holds.kind: holds for holds in holds_open_totals()}
        except Exception:
            logger.exception("metrics: could not read the open holds")
            return
        count = GaugeMetricFamily(
            "gateway_holds_open", "Open holds (reservations of calls in flight), by kind.", labels=["kind"]
        )
        amount = GaugeMetricFamily(
            "gateway_holds_amount",
            "Amount reserved by the open holds, by kind (a float of the exact Decimal).",
            labels=["kind"],
        )
        for kind in Hold.Kind.values:
            holds = totals.get(kind)
            count.add_metric([kind], holds.count if holds else 0)
            amount.add_metric([kind], float(holds.amount) if holds else 0.0)
        yield count
        yield amount


class CircuitCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        try:
            names = upstream_names_enabled()
            states = circuit_states(upstream_ids=list(names))
        except Exception:
            logger.exception("metrics: could not read the circuits")
            return
        gauge = GaugeMetricFamily(
            "gateway_upstream_circuit_state",
            "Circuit of each enabled upstream: 0 closed, 1 open, 2 half-open.",
            labels=["upstream"],
        )
        for upstream_id, name in names.items():
            gauge.add_metric([name], CIRCUIT_VALUES[states[upstream_id]])
        yield gauge


class ProcessRegistryCollector(Collector):
    """This process's default registry, when the metrics are not shared through files (tests,
    runserver): what core.metrics recorded here, and the process's own figures."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()
