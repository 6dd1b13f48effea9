"""`check` across Ray actors and placement-group bundles, on a local Ray cluster (CPU, Gloo)."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray", reason="ray not installed (pip install 'nccl-doctor[ray]')")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=3, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


@ray.remote(num_cpus=1)
class Worker:
    def pid(self) -> int:
        return os.getpid()


def test_check_runs_in_each_actor_environment_and_names_the_odd_one(cluster):
    from nccl_doctor.runtime.integrations.ray import check_actors

    workers = [Worker.remote(), Worker.options(runtime_env={"env_vars": {"NCCL_SOCKET_IFNAME": "nosuch0"}}).remote()]
    ray.get([w.pid.remote() for w in workers])
    report = check_actors(workers, timeout=15)
    assert report.verdict == "error" and report.facts["ray"]["actors"] == 2
    first = report.ordered()[0]
    assert first.ranks == [1] and "nosuch0" in first.message
    for w in workers:
        ray.kill(w)


def test_check_across_placement_group_bundles(cluster):
    from ray.util.placement_group import placement_group, remove_placement_group

    from nccl_doctor.runtime.integrations.ray import check_placement_group

    pg = placement_group([{"CPU": 1}, {"CPU": 1}])
    try:
        report = check_placement_group(pg, timeout=15)
    finally:
        remove_placement_group(pg)
    assert report.verdict != "error", [f.message for f in report.findings]
    assert [s["status"] for s in report.facts["stages"]][:2] == ["passed", "passed"]
    assert report.facts["ray"]["exit_codes"] == [0, 0]
