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
* preemption ratio: jobs preempted at least once inside the window / jobs; work lost: GPU-hours that preempted
  jobs had run since their last checkpoint (thrown away and run again), by preemptions inside the window;
* inference shortfall: server-seconds of inference demand not met, in all (``inference_short_server_s``, and as a
  share of the demand's server-seconds, ``inference_short_share``) and the part that loaning caused
  (``reclaim_wait_server_s``: demand the inference pool could have met but its servers were loaned or still
  reclaiming; what exceeds the whole pool is not counted there), also as a share (``reclaim_wait_share``);
* exposure: preemptions and scale-ins per busy lent GPU-hour (``*_per_busy_lent_gpu_h``), the window's counts over
  the GPU-hours training workers occupied on loaned servers inside the window (``None`` where nothing ran on a
  loan): a scheme that keeps less work on loans exposes less of it to reclaims.

Usage integrals cover the submit window only; jobs still running after it finish but no longer count. So do the
counts that compare schemes (reclaims, servers reclaimed, preemptions, preempted jobs, scale-ins, work lost): each
is the window's, and ``*_tail`` is what happened after the window while the last jobs finished (a tail whose length
differs between schemes, so it compares nothing).
"""

from __future__ import annotations

import math
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
    inference_short_share: float
    scale_ins: int
    busy_lent_gpu_h: float
    preemptions_per_busy_lent_gpu_h: float | None
    scale_ins_per_busy_lent_gpu_h: float | None
    preempted_jobs_tail: int
    preemptions_tail: int
    work_lost_tail_gpu_h: float
    reclaims_tail: int
    reclaimed_servers_tail: int
    scale_ins_tail: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarise(result: SimulationResult) -> SchemeMetrics:
    records = result.records
    queue = np.array([r.queue_s for r in records], dtype=float)
    jct = np.array([r.jct_s for r in records], dtype=float)
    window = result.window_s
    training = result.training_gpus * window
    everything = (result.training_gpus + result.inference_gpus) * window
    preempted = sum(1 for r in records if r.window_preemptions)
    preemptions = sum(r.window_preemptions for r in records)
    lost_gpu_s = math.fsum(r.window_lost_gpu_s for r in records)
    busy_lent_gpu_h = result.busy_loaned_gpu_s / 3600.0
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
        preemptions=preemptions,
        work_lost_gpu_h=lost_gpu_s / 3600.0,
        resizes=sum(r.resizes for r in records),
        reclaims=result.reclaims.window,
        reclaimed_servers=result.reclaimed_servers.window,
        allocator_calls=result.allocator_calls,
        migrations=result.migrations,
        inference_short_server_s=result.short_server_s,
        reclaim_wait_server_s=result.short_server_s - result.structural_short_server_s,
        reclaim_wait_share=(
            (result.short_server_s - result.structural_short_server_s) / result.demand_server_s
            if result.demand_server_s
            else 0.0
        ),
        inference_short_share=result.short_server_s / result.demand_server_s if result.demand_server_s else 0.0,
        scale_ins=result.scale_ins.window,
        busy_lent_gpu_h=busy_lent_gpu_h,
        preemptions_per_busy_lent_gpu_h=preemptions / busy_lent_gpu_h if busy_lent_gpu_h else None,
        scale_ins_per_busy_lent_gpu_h=result.scale_ins.window / busy_lent_gpu_h if busy_lent_gpu_h else None,
        preempted_jobs_tail=sum(1 for r in records if r.preemptions > r.window_preemptions),
        preemptions_tail=sum(r.preemptions for r in records) - preemptions,
        work_lost_tail_gpu_h=(math.fsum(r.lost_gpu_s for r in records) - lost_gpu_s) / 3600.0,
        reclaims_tail=result.reclaims.tail,
        reclaimed_servers_tail=result.reclaimed_servers.tail,
        scale_ins_tail=result.scale_ins.tail,
    )


def _stat(values: np.ndarray, which: str) -> float:
    if values.size == 0:
        return 0.0
    if which == "mean":
        return float(values.mean())
    if which == "median":
        return float(np.median(values))
    return float(np.percentile(values, 95))
