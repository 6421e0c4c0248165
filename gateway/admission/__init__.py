"""Admission: every governed call waits for its turn in a fair queue before it runs.

Work-conserving fair queuing, after Kubernetes API Priority and Fairness: a lone tenant (or a lone
agent calling in parallel) may use every seat of the process, and its calls past them wait a short,
bounded time instead of being refused; under contention the seats are shared between tenants by
weight, then between a tenant's actors, and a flooding tenant waits in its own queue. A call is
refused (429 with a Retry-After derived from its tenant's queue) only past the queue's bounds, or
past a rate quota the operator set.

- `fair_queue.py`: the seats, the queues and their bounds (deterministic; no I/O);
- `quota.py`: prices (the door's estimate and what a shape measured lately) and optional rate quotas;
- `door.py`: `Admission.enter`, the one entry point, and the call's `Ticket`;
- `courtesy.py`: a running call of a busier tenant gives way to lighter tenants between its stages;
- `gate.py`: the same turn for background work, charged to the tenant whose items it processes.

The manual: docs/http-api.md, "Admission and deadlines".
"""

from gateway.admission.courtesy import COURTESY_MAX_S, DOOR_COURTESY_MAX_S, give_way, held, holding
from gateway.admission.door import CROWDED_UNITS, Admission, TenantLimits, Ticket, load_admission
from gateway.admission.fair_queue import FairQueue, Left, Seat, Share
from gateway.admission.gate import Gate
from gateway.admission.quota import Prices, Quotas, Rates, retrieve_cost

__all__ = [
    "COURTESY_MAX_S",
    "CROWDED_UNITS",
    "DOOR_COURTESY_MAX_S",
    "Admission",
    "FairQueue",
    "Gate",
    "Left",
    "Prices",
    "Quotas",
    "Rates",
    "Seat",
    "Share",
    "TenantLimits",
    "Ticket",
    "give_way",
    "held",
    "holding",
    "load_admission",
    "retrieve_cost",
]
