"""The Lyra operator: observe the cluster, decide with the policy core, commit the changes (docs/architecture.md)."""
