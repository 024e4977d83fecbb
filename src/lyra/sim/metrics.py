"""The poster's figures, computed from one simulation's records and usage integrals.

Definitions (the poster gives none; these are ours):

* queuing time: all the time a job waited with no worker, from submit to its first start plus any wait after a
  preemption; JCT: finish - submit. Mean, median and 95th percentile over the jobs submitted in the window
  (percentiles by linear interpolation between order statistics, numpy's default);
* usage training: GPU-seconds busy on training servers / (training GPUs x window);
* usage overall: (busy training-server GPU-seconds + GPUs of serving inference servers + busy GPUs of loaned
  servers) / (all GPUs x window). A serving inference server counts all its GPUs as used, a loaned one only
  those running training workers;
* inference utilisation: GPUs of serving inference servers / inference GPUs (the poster's ~0.40);
* preemption ratio: jobs preempted at least once / jobs; work lost: GPU-hours that preempted jobs had run since
  their last checkpoint (thrown away and run again);
* inference shortfall: server-seconds of inference demand not met, in all (``inference_short_server_s``) and the
  part that loaning caused (``reclaim_wait_server_s``: demand the inference pool could have met but its servers
  were loaned or still reclaiming; what exceeds the whole pool is not counted there), also as a share of the
  demand's server-seconds (``reclaim_wait_share``).

Usage integrals cover the submit window only; jobs still running after it finish but no longer count.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from lyra.sim.engine import SimulationResult


@dataclass(frozen=True, slots=True)
class SchemeMetrics:
    jobs: int
    queue_mean_s: float
    queue_median_s: float
    queue_p95_s: float
    jct_mean_s: float
    jct_median_s: float
    jct_p95_s: float
    usage_training: float
    usage_overall: float
    inference_utilisation: float
    loaned_usage: float
    preemption_ratio: float
    preempted_jobs: int
    preemptions: int
    work_lost_gpu_h: float
    resizes: int
    reclaims: int
    reclaimed_servers: int
    allocator_calls: int
    migrations: int
    inference_short_server_s: float
    reclaim_wait_server_s: float
    reclaim_wait_share: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarise(result: SimulationResult) -> SchemeMetrics:
    records = result.records
    queue = np.array([r.queue_s for r in records], dtype=float)
    jct = np.array([r.jct_s for r in records], dtype=float)
    window = result.window_s
    training = result.training_gpus * window
    everything = (result.training_gpus + result.inference_gpus) * window
    preempted = sum(1 for r in records if r.preemptions)
    jobs = len(records)
    return SchemeMetrics(
        jobs=jobs,
        queue_mean_s=_stat(queue, "mean"),
        queue_median_s=_stat(queue, "median"),
        queue_p95_s=_stat(queue, "p95"),
        jct_mean_s=_stat(jct, "mean"),
        jct_median_s=_stat(jct, "median"),
        jct_p95_s=_stat(jct, "p95"),
        usage_training=result.busy_training_gpu_s / training,
        usage_overall=(result.busy_training_gpu_s + result.serving_gpu_s + result.busy_loaned_gpu_s) / everything,
        inference_utilisation=result.serving_gpu_s / (result.inference_gpus * window),
        loaned_usage=result.busy_loaned_gpu_s / result.loaned_gpu_s if result.loaned_gpu_s else 0.0,
        preemption_ratio=preempted / jobs if jobs else 0.0,
        preempted_jobs=preempted,
        preemptions=sum(r.preemptions for r in records),
        work_lost_gpu_h=sum(r.lost_gpu_s for r in records) / 3600.0,
        resizes=sum(r.resizes for r in records),
        reclaims=result.reclaims,
        reclaimed_servers=result.reclaimed_servers,
        allocator_calls=result.allocator_calls,
        migrations=result.migrations,
        inference_short_server_s=result.short_server_s,
        reclaim_wait_server_s=result.short_server_s - result.structural_short_server_s,
        reclaim_wait_share=(
            (result.short_server_s - result.structural_short_server_s) / result.demand_server_s
            if result.demand_server_s
            else 0.0
        ),
    )


def _stat(values: np.ndarray, which: str) -> float:
    if values.size == 0:
        return 0.0
    if which == "mean":
        return float(values.mean())
    if which == "median":
        return float(np.median(values))
    return float(np.percentile(values, 95))
