"""SLURM without a cluster: allocation environments as SLURM sets them, and the job the engines are submitted as."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import needs

from jupyter_hvd.kernel.launch import slurm
from jupyter_hvd.kernel.launch.hosts import Host
from jupyter_hvd.kernel.launch.options import HvdPool


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
        HvdPool(np=3, slurm=True, nodes=2).validate()
    with pytest.raises(ValueError, match="drop -H"):
        HvdPool(np=2, slurm=True, nodes=1, hosts="a:2").validate()
    with pytest.raises(ValueError, match="go with --slurm"):
        HvdPool(np=2, partition="gpu").validate()
    HvdPool(np=8, slurm=True, nodes=2, gpus_per_node=4, partition="gpu", time="1:00:00").validate()
    with pytest.raises(ValueError, match="only letters, digits"):  # a new #SBATCH line, or a command, otherwise
        HvdPool(np=2, slurm=True, nodes=1, partition="gpu\n#SBATCH --wrap=touch pwned").validate()
    with pytest.raises(ValueError, match="--time"):
        HvdPool(np=2, slurm=True, nodes=1, time="1:00:00 --x").validate()


def test_engine_job_script():
    opts = HvdPool(np=8, slurm=True, nodes=2, gpus_per_node=4, partition="gpu", time="1:00:00")
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
    opts = HvdPool(np=2, slurm=True, nodes=1, partition="{odd}")
    script = slurm.batch_template(opts, ["mpiexec"])
    assert "--partition={{odd}}" in script  # ipyparallel's formatter turns {{ back into {
    assert script.format(cluster_id="c", n=2, output_file="o", program_and_args="p").count("{odd}") == 1


def test_queue_state_command():
    assert slurm.squeue_command("4242") == ["squeue", "-h", "-j", "4242", "-o", "%T %R"]


# ---- a real single-node SLURM cluster (Debian's slurm-wlm), in a network namespace of its own -----------------

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
SLURM_ADDR = "10.251.79.1"  # exists only inside the cluster's namespace

DRIVER = """
import json, sys
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "jupyter_hvd")
from jupyter_hvd.kernel import owner as pools
ip.run_line_magic("hvd_start", sys.argv[1])
p = pools.current()
launcher = p.launcher.engine_set()
ip.run_cell_magic("hvd", "", "total = hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum).item()")
totals = [p.client[r.engine_id].pull("total", block=True) for r in p.ranks]
job = getattr(launcher, "job_id", "")
hosts = [r.host for r in p.ranks]
print("@@ " + json.dumps({"job": job, "totals": totals, "hosts": hosts, "mpiexec": launcher.args}), flush=True)
ip.run_line_magic("hvd_stop", "")
print("@@ stopped", flush=True)
"""


def _why_no_slurm() -> str:

    if os.geteuid() != 0:
        return "needs root to run slurmctld/slurmd in a network namespace"
    missing = [b for b in SLURM_BINARIES if not shutil.which(b)]
    if missing:
        return f"Debian's slurm-wlm and munge are not installed (missing {', '.join(missing)})"
    if not shutil.which("ip"):
        return "needs iproute2 (ip)"
    return ""


class SlurmCluster:
    """munged + slurmctld + slurmd for this host, in a network namespace with one address: nothing is reachable
    from outside, and the daemons leave when the test ends."""

    def __init__(self, root) -> None:

        self.root = root
        self.ns = f"jhs{os.getpid() % 100000}"
        self.host = socket.gethostname().split(".")[0]
        for d in ("state", "spool", "log"):
            (root / d).mkdir(parents=True)
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        (root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=no\n")
        self.conf = root / "slurm.conf"
        self.conf.write_text(
            f"""ClusterName=jhvd
SlurmctldHost={self.host}({SLURM_ADDR})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/builtin
NodeName={self.host} NodeAddr={SLURM_ADDR} CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
"""
        )
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        run = subprocess.run
        run(["ip", "netns", "add", self.ns], check=True)
        # getaddrinfo(AI_ADDRCONFIG) ignores loopback: the namespace needs a non-loopback address for SLURM.
        veth = [f"{self.ns}a", f"{self.ns}b"]
        run(["ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1]], check=True)
        for v in veth:
            run(["ip", "link", "set", v, "netns", self.ns], check=True)
            run(["ip", "-n", self.ns, "link", "set", v, "up"], check=True)
        run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True)
        run(["ip", "-n", self.ns, "addr", "add", f"{SLURM_ADDR}/24", "dev", veth[0]], check=True)
        etc = Path("/etc/netns") / self.ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{SLURM_ADDR} {self.host}\n")
        self.exec(
            "munged", "-f", f"--socket={root}/munge.sock", f"--key-file={key}", f"--pid-file={root}/munged.pid",
            f"--log-file={root}/log/munged.log", f"--seed-file={root}/munge.seed",
        )  # fmt: skip
        self.exec("slurmctld", "-f", str(self.conf))
        self.exec("slurmd", "-f", str(self.conf))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = self.exec("sinfo", "-h", "-o", "%T", check=False).stdout.strip()
            if out == "idle":
                return
            time.sleep(0.5)
        logs = "".join(p.read_text()[-600:] for p in (root / "log").glob("*.log"))
        self.stop()
        needs(f"slurmctld + slurmd did not come up within 60 s here:\n{logs}")

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["ip", "netns", "exec", self.ns, *args]
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=check, timeout=60)

    def stop(self) -> None:
        pids = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        shutil.rmtree(f"/etc/netns/{self.ns}", ignore_errors=True)


@pytest.fixture
def slurm_cluster(tmp_path):
    needs(_why_no_slurm())
    cluster = SlurmCluster(tmp_path / "slurm")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_engines_as_a_real_slurm_job(slurm_cluster, tmp_path):

    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    start = f"--slurm -N 1 -np 2 --cpu --ip {SLURM_ADDR} --timeout 120"
    slurm_cluster.env.update(
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        PATH=str(Path(sys.executable).parent) + ":" + slurm_cluster.env.get("PATH", ""),
    )
    done = slurm_cluster.exec(sys.executable, str(script), start, check=False)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    result = json.loads(next(ln[3:] for ln in said.splitlines() if ln.startswith("@@ {")))
    job = result["job"]
    # The user saw the job id and its queue state while waiting, then a pool whose allreduce works.
    assert f"SLURM job {job} submitted for the engines." in said
    assert f"SLURM job {job}: RUNNING" in said
    assert result["totals"] == [3.0, 3.0]
    assert "@@ stopped" in said
    # %hvd_stop cancelled the job: the queue is empty and slurmctld logged the cancel.
    assert slurm_cluster.exec("squeue", "-h").stdout.strip() == ""
    ctld_log = (slurm_cluster.root / "log" / "slurmctld.log").read_text()
    assert f"REQUEST_KILL_JOB JobId={job}" in ctld_log
    assert list((tmp_path / "runtime" / "jupyter-hvd").glob("*.sbatch")) == []  # the job script was removed once it ran


def test_inside_an_allocation_the_pool_takes_it(slurm_cluster, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    slurm_cluster.env.update(
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        PATH=str(Path(sys.executable).parent) + ":" + slurm_cluster.env.get("PATH", ""),
    )
    # The notebook runs inside `salloc -N 1 -n 2`; %hvd_start is given no -np.
    done = slurm_cluster.exec("salloc", "-N", "1", "-n", "2", sys.executable, str(script), "--cpu", check=False)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    result = json.loads(next(ln[3:] for ln in said.splitlines() if ln.startswith("@@ {")))
    assert f"2 ranks on {slurm_cluster.host}" in said  # "Using SLURM job N: 2 ranks on vm"
    assert result["totals"] == [3.0, 3.0]
    assert result["hosts"] == [slurm_cluster.host] * 2
    assert f"{slurm_cluster.host}:2" in result["mpiexec"]  # mpiexec --host node:2, from the allocation


KILLED_DRIVER = """
import json, os, signal, sys
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "jupyter_hvd")
from jupyter_hvd.kernel import owner as pools
ip.run_line_magic("hvd_start", sys.argv[1])
p = pools.current()
print("@@ " + json.dumps({"job": p.launcher.slurm_job(), "file": str(p.file.path)}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the kernel dies without stopping its pool
"""


def test_a_killed_kernels_slurm_job_is_cancelled_by_the_reaper(slurm_cluster, tmp_path):
    """kill -9 of the kernel: its reaper cancels the engines' SLURM job (the pool file carries the job id)."""
    script = tmp_path / "driver.py"
    script.write_text(KILLED_DRIVER)
    here = str(Path(__file__).resolve().parents[1])  # this tree's jupyter_hvd, in the driver, reaper and engines
    slurm_cluster.env.update(
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        PATH=str(Path(sys.executable).parent) + ":" + slurm_cluster.env.get("PATH", ""),
        PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p),
    )
    start = f"--slurm -N 1 -np 2 --cpu --ip {SLURM_ADDR} --timeout 120"
    done = slurm_cluster.exec(sys.executable, str(script), start, check=False)
    said = done.stdout + done.stderr
    assert done.returncode == -signal.SIGKILL, said
    result = json.loads(next(ln[3:] for ln in said.splitlines() if ln.startswith("@@ {")))
    job = result["job"]
    assert job, said
    deadline = time.monotonic() + 60
    while slurm_cluster.exec("squeue", "-h", "-j", job, check=False).stdout.strip():
        assert time.monotonic() < deadline, f"SLURM job {job} still runs a minute after its kernel was killed"
        time.sleep(1)
    ctld_log = (slurm_cluster.root / "log" / "slurmctld.log").read_text()
    assert f"REQUEST_KILL_JOB JobId={job}" in ctld_log
    assert not Path(result["file"]).exists(), "the reaper removes the pool file once it has cleaned up"
