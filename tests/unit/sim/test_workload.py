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


def test_work_is_duration_times_width_times_efficiency() -> None:
    setup = scenario("scaling: {overhead: 0.05}\ntraining: {servers: 2}")
    job = jobs_of(setup, trace((0, 300, 8)))[0]
    # 300 s x 8 GPUs x e(8) = 2400 / (1 + 0.05 x 7).
    assert job.work == pytest.approx(2400 / 1.35)


def test_a_job_wider_than_the_training_cluster_is_clamped_and_keeps_its_work() -> None:
    workload = build_workload(trace((0, 100, 32)), scenario("scaling: {overhead: 0.1}"), DAY)
    job = workload.jobs[0]
    # 8 training GPUs: the job runs on 8, with the work of 32 GPUs x 100 s x e(32) = 3200 / 4.1.
    assert (job.num_gpus, workload.clamped) == (8, 1)
    assert job.work == pytest.approx(3200 / 4.1)


def test_elastic_bounds_follow_the_factors_and_the_cluster() -> None:
    setup = scenario("training: {servers: 2}\nelasticity: {share: 1, min_factor: 0.5, max_factor: 2}")
    three, twelve = jobs_of(setup, trace((0, 10, 3), (1, 10, 12)))
    assert (three.elastic_min, three.elastic_max) == (2, 6)  # ceil(1.5), 3 x 2
    assert (twelve.elastic_min, twelve.elastic_max) == (6, 16)  # 12 / 2, 24 clamped to the 16 training GPUs


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
