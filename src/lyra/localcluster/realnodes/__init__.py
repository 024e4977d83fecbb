"""Real nodes for the local cluster: kubelets, containerd and runc, with a fake GPU device plugin.

``lyra cluster up --real-nodes N`` adds them beside the KWOK nodes (see :mod:`.cluster`): one network namespace for
the whole cluster (:mod:`.network`), and per node a runner in a private mount namespace and cgroup (:mod:`.node`)
with its configuration files (:mod:`.nodeconfig`); :mod:`.cgroups` finds and removes what they started.
"""
