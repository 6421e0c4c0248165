"""Policy engines behind one small interface: embedded Rego (regorus) or an OPA server."""

from gateway.policy.base import PolicyEngine
from gateway.policy.factory import load_engine

__all__ = ["PolicyEngine", "load_engine"]
