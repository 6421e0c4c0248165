"""Policy tooling over the engines in gateway.policy: `check` (compile, validate the data document, warn
on engine divergence), `explain` (a dry run for one actor and request), `impact` (a candidate replayed
on recorded calls) and `rego_tests` (the Rego tests beside the policies)."""
