"""Every Kubernetes name Lyra reads or writes, spelled once.

Labels on nodes: the admin sets ``lyra.dev/pool``; the operator owns ``lyra.dev/state`` on inference nodes. Labels
on pods: ``lyra.dev/role`` (what a pod is to Lyra), ``lyra.dev/job`` (the TrainingJob a worker belongs to, in the
pod's namespace) and ``lyra.dev/worker-index`` (a worker's index in its job). GPU labels are those of NVIDIA's GPU
feature discovery.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "lyra.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

# Node labels.
POOL_LABEL: Final = f"{GROUP}/pool"
POOL_TRAINING: Final = "training"
POOL_INFERENCE: Final = "inference"
POOLS: Final = (POOL_TRAINING, POOL_INFERENCE)
STATE_LABEL: Final = f"{GROUP}/state"
#: The operator's taint on inference nodes has the state label's key and value (effect NoSchedule), so placement is
#: right even without the extender: training pods tolerate ``loaned``, inference pods ``serving`` and ``idle``,
#: nobody ``reclaiming``.
STATE_TAINT: Final = STATE_LABEL
TAINT_EFFECT: Final = "NoSchedule"

# Node annotations the operator keeps (its state lives in the API, never only in memory).
RECLAIM_STARTED_ANNOTATION: Final = f"{GROUP}/reclaim-started"
IDLE_SINCE_ANNOTATION: Final = f"{GROUP}/idle-since"

# Deployment annotations the operator keeps.
#: On an InferenceService's Deployment: the hash of the pod template the operator rendered for it (the service's
#: template with everything the operator derives: GPUs, GPU-type affinity, tolerations, scheduler name). A service
#: whose rendered template hashes otherwise (or a Deployment without it) has its Deployment's template written.
TEMPLATE_HASH_ANNOTATION: Final = f"{GROUP}/template-hash"
#: The kind of the budget the operator keeps per InferenceService that asks for one (named after the service).
DISRUPTION_BUDGET_KIND: Final = "PodDisruptionBudget"
#: The finalizers the garbage collector sets and removes itself (a deletion in the foreground, or one that orphans):
#: any other holds an object being deleted until whoever set it removes it.
GARBAGE_COLLECTOR_FINALIZERS: Final = frozenset({"foregroundDeletion", "orphan"})
#: The ReplicaSet controller deletes a Deployment's replicas with the lowest cost first (Kubernetes' own key; the
#: operator writes it on inference replicas: :mod:`lyra.operator.services`, "Which replicas a scale-down deletes").
POD_DELETION_COST_ANNOTATION: Final = "controller.kubernetes.io/pod-deletion-cost"
#: A field selector for the pods bound to a node (``spec.nodeName`` set; the API server filters pods on it).
BOUND_POD_FIELD_SELECTOR: Final = "spec.nodeName!="

# Pod labels.
ROLE_LABEL: Final = f"{GROUP}/role"
ROLE_BASE: Final = "base"
ROLE_FLEXIBLE: Final = "flexible"
ROLE_INFERENCE: Final = "inference"
JOB_LABEL: Final = f"{GROUP}/job"
#: A worker's index in its job (``LYRA_WORKER``; its name ends in ``-w<index>`` too, which is read for workers made
#: by an operator older than this label).
WORKER_INDEX_LABEL: Final = f"{GROUP}/worker-index"
SERVICE_LABEL: Final = f"{GROUP}/service"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"

# Node health, as the kubelet and the node-lifecycle controller report it.
NODE_READY_CONDITION: Final = "Ready"
#: The node-lifecycle controller's taints on a node whose kubelet stopped reporting (Ready=Unknown) or reports
#: NotReady (Ready=False), with effects NoSchedule and NoExecute.
UNREACHABLE_TAINT: Final = "node.kubernetes.io/unreachable"
NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"
HEALTH_TAINTS: Final = (UNREACHABLE_TAINT, NOT_READY_TAINT)

# Pods: the condition and reasons that say a pod was disrupted (not failed by its own program), and the waiting
# reasons of a container that will not start by itself.
DISRUPTION_TARGET_CONDITION: Final = "DisruptionTarget"
# Pod phases (Kubernetes' own) that Lyra reads.
POD_PENDING: Final = "Pending"
POD_RUNNING: Final = "Running"
POD_SUCCEEDED: Final = "Succeeded"
POD_FAILED: Final = "Failed"
#: A pod in one of these phases holds nothing on its node any more.
FINISHED_POD_PHASES: Final = frozenset({POD_SUCCEEDED, POD_FAILED})
#: ``status.reason`` of a pod the kubelet evicted (node pressure) or stopped for a node shutdown (``Terminated``
#: since Kubernetes 1.21, ``NodeShutdown`` for a pod refused during one, ``Shutdown`` before 1.21).
DISRUPTED_POD_REASONS: Final = frozenset({"Evicted", "Terminated", "NodeShutdown", "Shutdown"})
STUCK_WAITING_REASONS: Final = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}
)
CONDITION_TRUE: Final = "True"

# Patch content types the API server accepts (the body's meaning depends on which).
#: RFC 7386: a field set to null is removed; with ``metadata.resourceVersion`` set, a precondition (409 if the object
#: changed, 404 if it is gone: a PATCH never creates, unlike a PUT of a Lease).
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
#: Server-side apply: creates the object or brings the fields this field manager owns to the body (JSON is YAML).
APPLY_PATCH: Final = "application/apply-patch+yaml"
#: What the operator's writes ask back: only the written object's metadata (its resourceVersion, uid and owners are
#: all a write's answer is read for), as ``meta.k8s.io/v1`` PartialObjectMetadata; a server that cannot transform
#: answers the whole object as JSON. Errors come back as a Status either way.
METADATA_ANSWER: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

# The operator: its field manager, the Lease that keeps one of it active, the source of its Events.
OPERATOR_NAME: Final = "lyra-operator"

# The worker contract (docs/user-guide.md): environment every worker container gets. ``PET_*`` are torchrun's own
# variables for its command-line options, so ``torchrun train.py`` runs elastic with no flags.
ENV_JOB: Final = "LYRA_JOB"
ENV_WORKER: Final = "LYRA_WORKER"
ENV_MIN_WORKERS: Final = "LYRA_MIN_WORKERS"
ENV_MAX_WORKERS: Final = "LYRA_MAX_WORKERS"
ENV_TORCHRUN_NNODES: Final = "PET_NNODES"
ENV_TORCHRUN_NPROC: Final = "PET_NPROC_PER_NODE"
ENV_TORCHRUN_RDZV_ID: Final = "PET_RDZV_ID"
ENV_TORCHRUN_RDZV_BACKEND: Final = "PET_RDZV_BACKEND"
ENV_TORCHRUN_RDZV_ENDPOINT: Final = "PET_RDZV_ENDPOINT"
ENV_TORCHRUN_RDZV_CONF: Final = "PET_RDZV_CONF"
ENV_TORCHRUN_MAX_RESTARTS: Final = "PET_MAX_RESTARTS"
ENV_TORCHRUN_MONITOR_INTERVAL: Final = "PET_MONITOR_INTERVAL"
#: Set to 1: each rendezvous round gets a fresh store for the workers' process group. torch's default shares one
#: store, kept by the agent of rank 0 across rounds, where the previous round's keys (the peer addresses gloo exchanged)
#: survive: when rank 0 stays on the same agent after a scale-in, the new round connects to dead peers and hangs.
ENV_TORCH_DISABLE_SHARED_STORE: Final = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
#: torchrun's rendezvous backend Lyra wires: a c10d TCP store hosted by one base worker's agent.
TORCHRUN_RDZV_BACKEND: Final = "c10d"
#: The port of that store on the hosting worker (torchrun's default for c10d), named on the job's headless Service.
TORCHRUN_RDZV_PORT: Final = 29400
TORCHRUN_RDZV_PORT_NAME: Final = "c10d-rdzv"

# Namespaces the test harness creates (so that leftovers are easy to find and delete).
TEST_NAMESPACE_LABEL: Final = f"{GROUP}/test-namespace"

# GPUs: the device plugin's resource and GPU feature discovery's labels.
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"

# Custom resources.
CATEGORY: Final = "lyra"
TRAINING_JOB_KIND: Final = "TrainingJob"
TRAINING_JOB_PLURAL: Final = "trainingjobs"
TRAINING_JOB_SHORT: Final = "tj"
INFERENCE_SERVICE_KIND: Final = "InferenceService"
INFERENCE_SERVICE_PLURAL: Final = "inferenceservices"
INFERENCE_SERVICE_SHORT: Final = "lis"  # "isvc" belongs to KServe
