"""Policy engines behind one small interface (base.PolicyEngine, built by factory.load_engine):
embedded Rego (regorus) or an OPA server. Nothing is imported here, so a policy process
(worker.py) starts without the service's HTTP and logging stack."""
