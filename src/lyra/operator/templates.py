"""What the CRD's schema lets through but the operator cannot build from a pod template, named by field.

The schema (:class:`lyra.api.resources.PodTemplate`) types what the operator reads, so a template that is not a pod
template is refused at ``kubectl apply``. Some rules span fields or are Lyra's own and are checked here, before any
pod or Deployment is made from the template: the operator gives each worker or replica its GPUs on the first
container, so GPUs asked for anywhere else would make a pod hold more than Lyra counts; container names must be
unique within a pod (the API server would refuse every pod made from the template).
"""

from __future__ import annotations

from lyra.api import names, tenancy
from lyra.api.resources import Container, PodTemplate

WHERE = "spec.template.spec"


def template_problem(template: PodTemplate, gpus_field: str) -> str | None:
    """Why no pod can be made from ``template``, naming the field; ``None`` if one can. ``gpus_field``: the spec field
    that sets the GPUs (``gpusPerWorker``, ``gpusPerReplica``)."""
    scheduling = tenancy.scheduling_problem(template.body().get("spec") or {}, WHERE)
    if scheduling is not None:
        return scheduling  # a field Lyra owns (docs/security.md)
    spec = template.spec
    named: set[str] = set()
    groups: list[tuple[str, list[Container]]] = [("containers", spec.containers)]
    groups.append(("initContainers", spec.init_containers or []))
    for group, containers in groups:
        for index, container in enumerate(containers):
            where = f"{WHERE}.{group}[{index}]"
            if container.name in named:
                return f"{where}.name: the container name {container.name!r} is used twice in the pod"
            named.add(container.name)
            if group == "containers" and index == 0:
                continue  # Lyra sets this one's GPUs from the spec
            resources = container.resources
            for part, quantities in (
                ("requests", resources and resources.requests),
                ("limits", resources and resources.limits),
            ):
                if quantities and names.GPU_RESOURCE in quantities:
                    return (
                        f"{where}.resources.{part}: {names.GPU_RESOURCE} is set by Lyra, on the first container only, "
                        f"from {gpus_field}; remove it"
                    )
    return None
