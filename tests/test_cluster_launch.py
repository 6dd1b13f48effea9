"""World detection from launcher environments, SLURM hostlists, fault specs."""

import pytest
from hypothesis import given, strategies as st

from nccl_doctor.cluster.faults import Fault, Faults, parse
from nccl_doctor.cluster.launch import WorldError, detect_world, expand_hostlist, slurm_port


def test_no_launcher_means_no_world():
    assert detect_world({"PATH": "/bin"}) is None


def test_torchrun_uses_agent_store_and_run_namespace():
    w = detect_world({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                      "MASTER_ADDR": "node1", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "job7",
                      "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_USE_AGENT_STORE": "True", "GROUP_RANK": "1"})
    assert (w.launcher, w.rank, w.world_size, w.local_rank, w.local_world_size) == ("torchrun", 3, 8, 1, 2)
    assert (w.master_addr, w.master_port, w.agent_store) == ("node1", 29400, True)
    assert w.run_id == "torchrun/job7/1"  # a restart gets fresh keys in the agent's store


def test_slurm_derives_master_from_nodelist_and_port_from_job_id():
    w = detect_world({"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "123456",
                      "SLURM_JOB_NODELIST": "gpu-[07-08,11],cpu1", "SLURM_TASKS_PER_NODE": "4(x4)"})
    assert (w.launcher, w.rank, w.world_size, w.local_rank, w.local_world_size) == ("slurm", 5, 16, 1, 4)
    assert w.master_addr == "gpu-07" and w.master_port == slurm_port("123456") == 15000 + 3456


def test_slurm_keeps_explicit_master():
    w = detect_world({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NODELIST": "a[1-2]",
                      "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29511"})
    assert (w.master_addr, w.master_port) == ("10.0.0.9", 29511)


def test_mpirun_needs_master_addr():
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    with pytest.raises(WorldError) as exc:
        detect_world(env)
    assert exc.value.cause == "rank-config-invalid" and "MASTER_ADDR" in str(exc.value)
    w = detect_world({**env, "MASTER_ADDR": "head"})
    assert (w.launcher, w.rank, w.world_size, w.local_rank, w.master_port) == ("mpirun", 1, 4, 1, 29500)


@pytest.mark.parametrize("env, cause", [
    ({"RANK": "4", "WORLD_SIZE": "4"}, "rank-config-invalid"),
    ({"RANK": "x", "WORLD_SIZE": "4"}, "rank-config-invalid"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "70000"}, "master-port-invalid"),
])
def test_inconsistent_environments_name_their_cause(env, cause):
    with pytest.raises(WorldError) as exc:
        detect_world(env)
    assert exc.value.cause == cause


@pytest.mark.parametrize("spec, hosts", [
    ("node01", ["node01"]),
    ("node[01-03]", ["node01", "node02", "node03"]),
    ("node[01-02,07],gpu5", ["node01", "node02", "node07", "gpu5"]),
    ("r[1-2]n[8-9]", ["r1n8", "r1n9", "r2n8", "r2n9"]),
    ("a[9-11]-ib", ["a9-ib", "a10-ib", "a11-ib"]),
    ("", []),
])
def test_expand_hostlist(spec, hosts):
    assert expand_hostlist(spec) == hosts


@given(st.lists(st.tuples(st.sampled_from(["n", "gpu-", "x"]), st.integers(0, 50), st.integers(0, 5),
                          st.integers(1, 3)), min_size=1, max_size=4))
def test_expand_hostlist_counts_and_padding(groups):
    """Each `prefix[lo-hi]` group expands to hi-lo+1 names, zero-padded to the width written."""
    spec = ",".join(f"{p}[{lo:0{w}d}-{lo + span:0{w}d}]" for p, lo, span, w in groups)
    hosts = expand_hostlist(spec)
    assert len(hosts) == sum(span + 1 for _, _, span, _ in groups)
    first = groups[0]
    assert hosts[0] == f"{first[0]}{first[1]:0{first[3]}d}"


def test_fault_specs():
    faults = parse("stall:rank=2:stage=collectives:op=all_reduce; die:rank=1:op=broadcast;skip:rank=3")
    assert faults == [Fault("stall", 2, "collectives", "all_reduce"), Fault("die", 1, None, "broadcast"),
                      Fault("skip", 3)]
    mine = Faults.from_env(1, {"NCCL_DOCTOR_FAULT": "die:rank=1:op=broadcast;skip:rank=3"})
    assert mine.dies_during("collectives", "broadcast") and not mine.dies_during("collectives", "all_reduce")
    assert not mine.skips_start() and Faults.from_env(3, {"NCCL_DOCTOR_FAULT": "skip:rank=3"}).skips_start()
    with pytest.raises(ValueError):
        parse("explode:rank=1")
