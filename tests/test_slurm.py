"""SLURM without a cluster: allocation environments as SLURM sets them, and the job the engines are submitted as."""

from __future__ import annotations

import pytest

from jupyter_hvd.kernel import slurm
from jupyter_hvd.kernel.hosts import Host
from jupyter_hvd.kernel.pool import PoolOptions


@pytest.mark.parametrize(
    ("nodelist", "nodes"),
    [
        ("node07", ["node07"]),
        ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
        ("gpu-a[8-10],login1", ["gpu-a8", "gpu-a9", "gpu-a10", "login1"]),
        ("nid[0098-0101]", ["nid0098", "nid0099", "nid0100", "nid0101"]),
        ("r[1-2]n[1,3]", ["r1n1", "r1n3", "r2n1", "r2n3"]),
        ("a[1-2],b[3-4]", ["a1", "a2", "b3", "b4"]),
    ],
)
def test_node_lists(nodelist, nodes):
    assert slurm.expand_nodelist(nodelist) == nodes


def test_bad_node_range_is_explained():
    with pytest.raises(ValueError, match="cannot read the range '5-2'"):
        slurm.expand_nodelist("node[5-2]")


@pytest.mark.parametrize(
    ("text", "counts"), [("4", [4]), ("4(x2)", [4, 4]), ("4(x2),2", [4, 4, 2]), ("1,2(x3)", [1, 2, 2, 2])]
)
def test_tasks_per_node(text, counts):
    assert slurm.expand_counts(text) == counts


def test_bad_counts_are_explained():
    with pytest.raises(ValueError, match=r"expected e\.g\. 4\(x2\),2"):
        slurm.expand_counts("4x2")


# What `salloc -N 2 --gpus-per-node 4` puts in the environment (Slurm 23), trimmed to what we read.
GPU_ALLOCATION = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "node[01-02]",
    "SLURM_NNODES": "2",
    "SLURM_TASKS_PER_NODE": "1(x2)",
    "SLURM_GPUS_ON_NODE": "4",
    "SLURM_GPUS_PER_NODE": "4",
    "SLURM_JOB_GPUS": "0,1,2,3",
}


def test_gpu_allocation_gives_one_rank_per_gpu():
    alloc = slurm.allocation(GPU_ALLOCATION)
    assert alloc is not None
    assert alloc.hosts() == [Host("node01", 4), Host("node02", 4)]
    assert alloc.ranks == 8
    assert alloc.hosts_spec() == "node01:4,node02:4"


@pytest.mark.parametrize(
    ("extra", "gpus"),
    [
        ({"SLURM_GPUS_PER_NODE": "a100:4"}, 4),
        ({"SLURM_GPUS_PER_NODE": "a100:2,v100:2"}, 4),
        ({"SLURM_JOB_GPUS": "0,1"}, 2),
        ({}, 0),
    ],
)
def test_gpu_counts_in_their_several_spellings(extra, gpus):
    assert slurm.gpus_per_node(extra) == gpus


def test_cpu_allocation_uses_the_tasks():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "cn[1-3]", "SLURM_TASKS_PER_NODE": "4(x2),2"}
    alloc = slurm.allocation(env)
    assert alloc is not None
    assert alloc.hosts_spec() == "cn1:4,cn2:4,cn3:2"
    assert alloc.ranks == 10


def test_mismatched_allocation_is_explained():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "cn[1-3]", "SLURM_TASKS_PER_NODE": "4(x2)"}
    with pytest.raises(ValueError, match="does not match the 3 nodes"):
        slurm.allocation(env)


def test_outside_an_allocation():
    assert slurm.allocation({"PATH": "/usr/bin"}) is None


def test_start_without_np_uses_the_allocation_else_two():
    assert slurm.choose_ranks(None, "", "", 0, 0, GPU_ALLOCATION) == (
        8,
        "node01:4,node02:4",
        "Using SLURM job 4242: 8 ranks on node01, node02",
    )
    assert slurm.choose_ranks(None, "", "", 0, 0, {}) == (2, "", "")
    assert slurm.choose_ranks(3, "", "", 0, 0, GPU_ALLOCATION) == (3, "", "")  # -np given: this host only
    assert slurm.choose_ranks(None, "a:2,b:3", "", 0, 0, {}) == (5, "a:2,b:3", "")
    assert slurm.choose_ranks(None, "", "", 2, 4, {}) == (8, "", "")  # --slurm -N 2 --gpus-per-node 4


def test_slurm_job_options_are_checked():
    with pytest.raises(ValueError, match="does not spread evenly"):
        PoolOptions(np=3, slurm_nodes=2).validate()
    with pytest.raises(ValueError, match="drop -H"):
        PoolOptions(np=2, slurm_nodes=1, hosts="a:2").validate()
    with pytest.raises(ValueError, match="go with --slurm"):
        PoolOptions(np=2, partition="gpu").validate()
    PoolOptions(np=8, slurm_nodes=2, gpus_per_node=4, partition="gpu", time_limit="1:00:00").validate()


def test_engine_job_script():
    opts = PoolOptions(np=8, slurm_nodes=2, gpus_per_node=4, partition="gpu", time_limit="1:00:00")
    kw = slurm.launcher_kwargs(opts, {"JUPYTER_HVD_POOL": "hvd-1"}, ["/venv/bin/mpiexec", "--bind-to", "none"])
    script = kw["batch_template"]
    assert script.startswith("#!/bin/sh\n")
    for line in (
        "#SBATCH --job-name=jupyter-hvd-{cluster_id}",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks={n}",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=1:00:00",
        "#SBATCH --export=ALL",
    ):
        assert line + "\n" in script
    run = script.strip().splitlines()[-1]
    # mpiexec spreads the engines over the job's nodes, forwarding what remote engines need.
    assert run.startswith("/venv/bin/mpiexec --bind-to none -x ")
    assert run.endswith(" -n {n} {program_and_args}")
    assert "-x IPP_CONNECTION_INFO" in run and "-x JUPYTER_HVD_POOL" in run
    assert kw["environment"] == {"JUPYTER_HVD_POOL": "hvd-1"}


def test_braces_in_user_values_survive_the_template():
    opts = PoolOptions(np=2, slurm_nodes=1, partition="{odd}")
    script = slurm.batch_template(opts, ["mpiexec"])
    assert "--partition={{odd}}" in script  # ipyparallel's formatter turns {{ back into {
    assert script.format(cluster_id="c", n=2, output_file="o", program_and_args="p").count("{odd}") == 1


def test_queue_state_command():
    assert slurm.squeue_command("4242") == ["squeue", "-h", "-j", "4242", "-o", "%T %R"]
