"""SLURM: use the allocation a notebook runs in, or submit the pool's engines as a job of their own.

Runs in the user's kernel. Inside an allocation (`salloc -N 2 --gpus-per-node 4`, then Jupyter) the SLURM_*
variables describe the nodes, and `%hvd_start` with no -np starts one rank per allocated GPU through mpiexec
(Open MPI starts its daemons with srun there). Outside one, `%hvd_start --slurm -N 2 --gpus-per-node 4` submits the
engines with ipyparallel's SLURM launcher (sbatch) and shows the job's queue state until its engines register;
`%hvd_stop` cancels the job.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import state
from ..errors import PoolError
from .hosts import Host, forwarded_keys, pool_hosts, total_slots

ENGINE_LAUNCHER = "slurm"  # ipyparallel's SlurmEngineSetLauncher
POLL_S = 2.0  # how often squeue is asked while the job waits in the queue
FAILED_STATES = ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")


def expand_nodelist(text: str) -> list[str]:
    """Expand a SLURM node list: `node[01-03,07],gpu-a1` gives node01, node02, node03, node07, gpu-a1.

    Zero padding is kept, and several bracket groups in one name (`r[1-2]n[1-2]`) give every combination.
    """
    names: list[str] = []
    for item in _split_top_level(text.strip()):
        if item:
            names.extend(_expand_one(item))
    return names


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    values: list[str] = []
    for part in m.group(1).split(","):
        lo, sep, hi = part.partition("-")
        if not sep:
            values.append(lo)
            continue
        if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
            raise ValueError(f"SLURM node list {item!r}: cannot read the range {part!r}")
        values.extend(str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1))
    return [name for v in values for name in _expand_one(head + v + tail)]


def expand_counts(text: str) -> list[int]:
    """Expand SLURM's per-node counts: `4(x2),2` gives [4, 4, 2] (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE)."""
    counts: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if not m:
            raise ValueError(f"cannot read the SLURM count list {text!r} (expected e.g. 4(x2),2)")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def gpus_per_node(env: dict[str, str]) -> int:
    """GPUs on each node of the allocation (0 when none were asked for)."""
    for key in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = env.get(key, "")
        # `a100:4` (typed) or `4`; several types (`a100:2,v100:2`) add up.
        total = sum(int(p.rsplit(":", 1)[-1]) for p in value.split(",") if p.rsplit(":", 1)[-1].isdigit())
        if total:
            return total
    gpus = env.get("SLURM_JOB_GPUS") or env.get("SLURM_STEP_GPUS") or ""
    return len([g for g in gpus.split(",") if g.strip()])


@dataclass
class Allocation:
    """The nodes of a SLURM allocation and how many ranks each takes."""

    job_id: str
    nodes: list[str]
    ranks_per_node: list[int]
    gpus_per_node: int

    @property
    def ranks(self) -> int:
        """Ranks the whole allocation takes (one per GPU, else one per task)."""
        return sum(self.ranks_per_node)

    def hosts(self) -> list[Host]:
        """The allocation as `-H` hosts."""
        return [Host(n, k) for n, k in zip(self.nodes, self.ranks_per_node, strict=True)]

    def hosts_spec(self) -> str:
        """The allocation as a `-H` argument: node01:4,node02:4."""
        return ",".join(f"{h.name}:{h.slots}" for h in self.hosts())


def allocation(env: dict[str, str] | None = None) -> Allocation | None:
    """The SLURM allocation this kernel runs in, from its SLURM_* variables; None outside one."""
    env = dict(os.environ) if env is None else env
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not nodelist or not job_id:
        return None
    nodes = expand_nodelist(nodelist)
    gpus = gpus_per_node(env)
    if gpus:
        per_node = [gpus] * len(nodes)
    else:
        tasks = expand_counts(env.get("SLURM_TASKS_PER_NODE", "")) or [1] * len(nodes)
        if len(tasks) != len(nodes):
            raise ValueError(
                f"SLURM_TASKS_PER_NODE={env.get('SLURM_TASKS_PER_NODE')!r} does not match the {len(nodes)} nodes "
                f"of SLURM_JOB_NODELIST={nodelist!r}"
            )
        per_node = tasks
    return Allocation(job_id=job_id, nodes=nodes, ranks_per_node=per_node, gpus_per_node=gpus)


SBATCH_WORD = re.compile(r"[\w@%+=:,./-]+")


def check_options(options: Any) -> None:
    """Raise ValueError for --slurm options that cannot make a job."""
    if not options.slurm_nodes:
        if options.gpus_per_node or options.partition or options.time:
            raise ValueError("--gpus-per-node, --partition and --time go with --slurm -N NODES")
        return
    if options.slurm_nodes < 1:
        raise ValueError(f"-N must be at least 1 (got {options.slurm_nodes})")
    if options.hosts or options.hostfile:
        raise ValueError("--slurm chooses the hosts itself: drop -H/--hostfile")
    if options.np % options.slurm_nodes:
        raise ValueError(
            f"-np {options.np} does not spread evenly over -N {options.slurm_nodes} nodes; "
            f"use a multiple of {options.slurm_nodes}"
        )
    for flag, value in (("--partition", options.partition), ("--time", options.time)):
        # These go into #SBATCH lines, which sbatch reads with its own quoting: a newline would start a new line.
        if value and not SBATCH_WORD.fullmatch(value):
            raise ValueError(f"{flag} {value!r}: only letters, digits and @%+=:,./- go into a SLURM job's options")


def batch_template(options: Any, mpi_cmd: list[str]) -> str:
    """The sbatch script for the engines, in ipyparallel's template syntax ({n}, {program_and_args}, ...).

    Inside the job, mpiexec starts one engine per rank over the job's nodes (Open MPI uses srun for its daemons).
    """
    lines = [
        "#!/bin/sh",
        "#SBATCH --job-name=jupyter-hvd-{cluster_id}",
        *resource_lines(options, options.slurm_nodes, "{n}", _braces),  # {n}: ipyparallel's, not escaped
        "#SBATCH --output={output_file}",
        "#SBATCH --export=ALL",
    ]
    lines.append(f"{_braces(shlex.join(mpi_cmd))} -n {{n}} {{program_and_args}}")
    return "\n".join(lines) + "\n"


def resource_lines(options: Any, nodes: int, ntasks: int | str, quote: Any = str) -> list[str]:
    """The #SBATCH lines asking for a pool's nodes, ranks, GPUs, partition and time (`quote`: for what the user
    typed)."""
    per_node = max(1, (options.np or 1) // max(nodes, 1))
    lines = [f"#SBATCH --nodes={nodes}", f"#SBATCH --ntasks={ntasks}", f"#SBATCH --ntasks-per-node={per_node}"]
    if options.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={options.gpus_per_node}")
    if options.partition:
        lines.append(f"#SBATCH --partition={quote(options.partition)}")
    if options.time:
        lines.append(f"#SBATCH --time={quote(options.time)}")
    return lines


def _braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def launcher_kwargs(options: Any, env: dict[str, str], mpi_cmd: list[str]) -> dict[str, Any]:
    """Arguments for ipyparallel's SlurmEngineSetLauncher: our batch script and the engines' environment."""
    forward = [a for key in forwarded_keys(env) for a in ("-x", key)]
    # An absolute name: ipyparallel would otherwise write the script into the notebook's working directory.
    script = state.state_dir() / f"slurm-engines-{env.get(state.POOL_ENV) or os.getpid()}.sbatch"
    return {
        "batch_template": batch_template(options, [*mpi_cmd, *forward]),
        "batch_file_name": str(script),
        "environment": env,
    }


def squeue_command(job_id: str) -> list[str]:
    """The squeue call that gives a job's state and reason (`PENDING Resources`)."""
    return ["squeue", "-h", "-j", str(job_id), "-o", "%T %R"]


def job_state(job_id: str) -> tuple[str, str]:
    """(state, reason) of a job, ("", "") when squeue no longer knows it."""
    try:
        out = subprocess.run(squeue_command(job_id), capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "", ""
    state, _, reason = out.partition(" ")
    reason = reason.strip("()")  # squeue writes a pending job's reason as "(Resources)"
    return state, "" if reason == "None" else reason


def wait_for_job(launcher: Any, timeout: float) -> None:
    """Show the engines' job id and queue state until it runs; raise PoolError if it fails or stays queued."""
    job_id = getattr(launcher, "job_id", "")
    print(f"SLURM job {job_id} submitted for the engines.", flush=True)
    deadline = time.monotonic() + timeout
    shown = None
    while True:
        state, reason = job_state(job_id)
        if (state, reason) != shown:
            print(f"SLURM job {job_id}: {state or 'gone'}{f' ({reason})' if reason else ''}", flush=True)
            shown = (state, reason)
        if state in ("RUNNING", "COMPLETING"):
            # The script has done its work (a failed job's script stays, for the user to read).
            if getattr(launcher, "batch_file", ""):
                Path(launcher.batch_file).unlink(missing_ok=True)
            return
        if state in FAILED_STATES or not state:
            raise PoolError(
                f"SLURM job {job_id} for the engines ended before they started ({state or 'no longer queued'}).",
                f"Its output is in {getattr(launcher, 'output_file', 'the job output file')}; "
                "fix the cause, then %hvd_restart.",
            )
        if time.monotonic() > deadline:
            raise PoolError(
                f"SLURM job {job_id} still waits in the queue ({state} {reason}) after {timeout:g} s.",
                "Start again with a bigger --timeout or fewer nodes (%hvd_stop cancels a job still queued).",
            )
        time.sleep(POLL_S)


def choose_ranks(
    np: int | None, hosts_spec: str, hostfile: str, nodes: int, gpus: int, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """-np and -H for `%hvd_start`: as given; else the SLURM allocation this kernel runs in; else the slots of
    the hosts, or nodes x GPUs of a --slurm job; else 2. Returns (np, hosts, a note for the user or "")."""
    if np is not None:
        return np, hosts_spec, ""
    if hosts_spec or hostfile:
        slots = total_slots(pool_hosts(hosts_spec, hostfile))
        if slots is None:
            raise ValueError("The hostfile leaves some slot counts open: give -np")
        return slots, hosts_spec, ""
    if nodes:
        return nodes * max(gpus, 1), "", ""
    alloc = allocation(env)
    if alloc is None:
        return 2, "", ""
    return (
        alloc.ranks,
        alloc.hosts_spec(),
        f"Using SLURM job {alloc.job_id}: {alloc.ranks} ranks on {', '.join(alloc.nodes)}",
    )
