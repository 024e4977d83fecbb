"""From trace rows to jobs: the work each job carries and the seeded draws, each from its own stream."""

from __future__ import annotations

import math
import random

import pytest

from lyra.sim.scenario import Scenario
from lyra.sim.traces import Trace
from lyra.sim.workload import JobSpec, Window, build_workload
from tests.unit.sim.builders import scenario, trace

#: 200 jobs of 1 to 8 GPUs over a day.
MANY = trace(*((i * 400.0, 100.0 + i, 1 + i % 8) for i in range(200)))
DAY = Window(0.0, 86_400.0)


def jobs_of(setup: Scenario, rows: Trace = MANY, window: Window = DAY) -> tuple[JobSpec, ...]:
    return build_workload(rows, setup, window).jobs


def test_work_is_duration_times_workers_times_efficiency() -> None:
    setup = scenario("scaling: {overhead: 0.05}\ntraining: {servers: 4, gpus_per_server: 2}")
    job = jobs_of(setup, trace((0, 300, 8)))[0]
    # Four workers of 2 GPUs: 300 s x 4 workers x e(4) = 1200 / (1 + 0.05 x 3).
    assert (job.gpus_per_worker, job.workers) == (2, 4)
    assert job.work == pytest.approx(1200 / 1.15)
    alone = jobs_of(scenario("scaling: {overhead: 0.05}\ntraining: {servers: 2}"), trace((0, 300, 8)))[0]
    # One worker of 8 GPUs on an 8-GPU server: 300 s x 1 worker x e(1).
    assert (alone.gpus_per_worker, alone.workers, alone.work) == (8, 1, 300)


def test_a_job_wider_than_the_training_cluster_is_clamped_and_keeps_its_work() -> None:
    workload = build_workload(trace((0, 100, 32)), scenario("scaling: {overhead: 0.1}"), DAY)
    job = workload.jobs[0]
    # 8 training GPUs: the job runs as one worker of 8, with the work of its 32 GPUs (4 such workers) x 100 s x
    # e(4) = 400 / 1.3.
    assert (job.num_gpus, job.gpus_per_worker, workload.clamped) == (8, 8, 1)
    assert job.work == pytest.approx(400 / 1.3)


def test_elastic_bounds_count_workers_and_follow_the_factors_and_the_cluster() -> None:
    setup = scenario(
        "training: {servers: 3, gpus_per_server: 4}\nelasticity: {share: 1, min_factor: 0.5, max_factor: 2}"
    )
    three, twelve = jobs_of(setup, trace((0, 10, 3), (1, 10, 12)))
    assert (three.gpus_per_worker, three.elastic_min, three.elastic_max) == (3, 1, 2)  # one worker of 3: 1 to 2
    # Three workers of 4 GPUs (the largest divisor of 12 up to the 4-GPU servers): ceil(1.5) = 2 to 3 x 2 = 6,
    # clamped to the 3 such workers the training servers hold.
    assert (twelve.gpus_per_worker, twelve.elastic_min, twelve.elastic_max) == (4, 2, 3)


@pytest.mark.parametrize(
    ("gpus", "server", "per_worker"),
    [(1, 8, 1), (4, 8, 4), (8, 8, 8), (16, 8, 8), (64, 8, 8), (12, 8, 6), (10, 8, 5), (7, 8, 7), (13, 8, 1),
     (24, 8, 8), (6, 4, 3), (8, 1, 1)],
)  # fmt: skip
def test_a_job_runs_as_workers_of_the_largest_divisor_of_its_gpus_up_to_a_server(
    gpus: int, server: int, per_worker: int
) -> None:
    setup = scenario(f"training: {{servers: 8, gpus_per_server: {server}}}\ninference: {{gpus_per_server: {server}}}")
    (job,) = jobs_of(setup, trace((0, 10, gpus)))
    assert job.gpus_per_worker == per_worker
    assert job.workers * per_worker == gpus == job.num_gpus
    assert gpus % per_worker == 0
    assert per_worker <= server
    assert not any(gpus % size == 0 for size in range(per_worker + 1, min(gpus, server) + 1))


def test_the_worker_size_follows_the_smallest_server_a_job_may_use() -> None:
    """Inference servers of 2 GPUs: an 8-GPU job that fits their memory (it may use them) runs as 2-GPU workers, one
    that does not as one 8-GPU worker on a training server."""
    setup = scenario("training: {servers: 2}\ninference: {gpus_per_server: 2}\nmemory: {inference_fit_share: 0.5}")
    jobs = jobs_of(setup, trace(*((i, 10, 8) for i in range(40))))
    fitting = {job.gpus_per_worker for job in jobs if job.fits_inference_gpu}
    others = {job.gpus_per_worker for job in jobs if not job.fits_inference_gpu}
    assert (fitting, others) == ({2}, {8})


def test_the_first_stream_gives_elasticity_and_estimate_errors() -> None:
    setup = scenario("elasticity: {share: 0.5}\ndurations: {knowledge: noisy, sigma: 0.5}\nseed: 3")
    rng = random.Random(3)
    draws = [(rng.random(), rng.gauss(0.0, 1.0)) for _ in MANY.jobs]
    jobs = jobs_of(setup)
    assert [j.drawn_elastic for j in jobs] == [u < 0.5 for u, _ in draws]
    assert [j.estimate_factor for j in jobs] == pytest.approx([math.exp(0.5 * z) for _, z in draws])


def test_the_gpus_stream_gives_memory_fit_and_mixing() -> None:
    setup = scenario("memory: {inference_fit_share: 0.3}\nelasticity: {share: 0.5, mixing_share: 0.4}\nseed: 3")
    rng = random.Random("3/gpus")
    draws = [(rng.random(), rng.random()) for _ in MANY.jobs]
    jobs = jobs_of(setup)
    assert [j.fits_inference_gpu for j in jobs] == [m < 0.3 for m, _ in draws]
    mixing = [j.drawn_elastic and x < 0.4 for j, (_, x) in zip(jobs, draws, strict=True)]
    assert [j.mixes_gpu_types for j in jobs] == mixing


def test_larger_jobs_fit_an_inference_gpu_less_often() -> None:
    setup = scenario("memory: {inference_fit_share: 0.8, size_exponent: 1}\nseed: 3")
    rng = random.Random("3/gpus")
    draws = [(rng.random(), rng.random()) for _ in MANY.jobs]
    jobs = jobs_of(setup)
    # A job of n GPUs fits when its draw is below 0.8 / n: a 1-GPU job below 0.8, an 8-GPU job below 0.1.
    assert [j.fits_inference_gpu for j in jobs] == [m < 0.8 / j.num_gpus for j, (m, _) in zip(jobs, draws, strict=True)]
    small = [j.fits_inference_gpu for j in jobs if j.num_gpus == 1]
    large = [j.fits_inference_gpu for j in jobs if j.num_gpus >= 4]
    assert sum(small) / len(small) > 0.5
    assert sum(large) / len(large) < 0.25


def test_changing_the_fit_share_reshuffles_nothing_else() -> None:
    low = jobs_of(scenario("memory: {inference_fit_share: 0.25}\nelasticity: {share: 0.5, mixing_share: 0.5}"))
    high = jobs_of(scenario("memory: {inference_fit_share: 0.75}\nelasticity: {share: 0.5, mixing_share: 0.5}"))
    assert [j.drawn_elastic for j in low] == [j.drawn_elastic for j in high]
    assert [j.estimate_factor for j in low] == [j.estimate_factor for j in high]
    assert [j.mixes_gpu_types for j in low] == [j.mixes_gpu_types for j in high]
    # The same draw m decides both: every job that fits at 0.25 fits at 0.75.
    assert all(h.fits_inference_gpu for lo, h in zip(low, high, strict=True) if lo.fits_inference_gpu)
    assert sum(j.fits_inference_gpu for j in low) < sum(j.fits_inference_gpu for j in high)


def test_changing_the_elastic_share_does_not_change_who_fits() -> None:
    half = jobs_of(scenario("memory: {inference_fit_share: 0.5}\nelasticity: {share: 0.5}"))
    all_elastic = jobs_of(scenario("memory: {inference_fit_share: 0.5}\nelasticity: {share: 1}"))
    assert [j.fits_inference_gpu for j in half] == [j.fits_inference_gpu for j in all_elastic]


def test_a_mixing_share_marks_some_elastic_jobs_and_only_them() -> None:
    jobs = jobs_of(scenario("elasticity: {share: 0.5, mixing_share: 0.5}"))
    mixing = [j for j in jobs if j.mixes_gpu_types]
    assert all(j.drawn_elastic for j in mixing)
    assert 0 < len(mixing) < sum(j.drawn_elastic for j in jobs)
    assert not any(j.mixes_gpu_types for j in jobs_of(scenario("elasticity: {share: 0.5, mixing_share: 0}")))


def test_every_job_fits_when_both_pools_have_the_same_type() -> None:
    setup = scenario("memory: {inference_fit_share: 0}\ninference: {gpu_type: V100}")
    assert all(j.fits_inference_gpu for j in jobs_of(setup))
    assert not any(j.fits_inference_gpu for j in jobs_of(scenario("memory: {inference_fit_share: 0}")))


def test_draws_are_made_for_jobs_outside_the_window_too() -> None:
    # A window that starts later sees the same draws for its jobs as the whole day does.
    setup = scenario("memory: {inference_fit_share: 0.5}\nelasticity: {share: 0.5, mixing_share: 0.5}")
    whole = {j.name: j for j in jobs_of(setup)}
    later = jobs_of(setup, window=Window(40_000.0, 86_400.0))
    assert later
    for job in later:
        same = whole[job.name]
        assert (job.drawn_elastic, job.fits_inference_gpu, job.mixes_gpu_types, job.estimate_factor) == (
            same.drawn_elastic,
            same.fits_inference_gpu,
            same.mixes_gpu_types,
            same.estimate_factor,
        )
        assert job.submit_s == same.submit_s - 40_000.0
