"""Lyra's Kubernetes API, spelled once: group, labels, taints and resource names (``names``). Shared by every
component that talks to Kubernetes (the local cluster, the scheduler extender, the operator); imports no adapter."""
