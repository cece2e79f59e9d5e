"""What a pool is started with: every `%hvd_start` option and set-up setting, declared once.

Each option is a trait of `HvdPool`. From that one declaration come the `%hvd_start` flag and its help (and so
the README's table), the default, and the config key: `c.HvdPool.<name>` in `jupyter_hvd_config.py` (or `.json`)
in any Jupyter config directory (`jupyter --paths`), in `ipython_kernel_config.py`, or `%config HvdPool.np = 4` in
a notebook. A flag given to `%hvd_start` wins over config, config over the built-in default.
"""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.core.magic_arguments import argument
from traitlets import Bool, Dict, Enum, Float, Int, TraitType, Unicode
from traitlets.config import Config, Configurable

from ... import wire
from ...widgets import VIEW_MODES
from . import hosts, slurm
from .hosts import Host

OPS = ("auto", "nccl", "mpi")
# CPU ranks this host runs per core without --oversubscribe: more than one per core is useful (each gets fewer torch
# threads), thousands would only exhaust the machine's memory and processes.
CPU_RANKS_PER_CORE = 4
CONFIG_FILE = "jupyter_hvd_config"  # .py or .json, in each of jupyter_core's config directories

# Environment variables of earlier releases, read for one more release with a warning.
DEPRECATED_ENV = {
    "JUPYTER_HVD_MPIEXEC": "mpiexec",
    "JUPYTER_HVD_LAUNCH_AGENT": "launch_agent",
    "JUPYTER_HVD_LIVE_VIEW": "live_view",
}


class HvdPool(Configurable):
    """The options of one jupyter-hvd pool; a restart reuses them unchanged."""

    # ---- %hvd_start flags (tag: flags, metavar) -----------------------------------------------------------------
    np = Int(
        None,
        allow_none=True,
        help="number of ranks, one engine each (default: the SLURM allocation, the hosts' slots, or 2)",
    ).tag(config=True, flags=("-np",))
    hosts = Unicode("", help="hosts for the ranks: server1:4,server2:4").tag(
        config=True, flags=("-H", "--hosts"), metavar="HOST:SLOTS,..."
    )
    hostfile = Unicode("", help="Open MPI hostfile (`host slots=N` per line)").tag(config=True, metavar="FILE")
    ip = Unicode("", help="address the controller listens on (default: the route to the hosts)").tag(config=True)
    slurm = Bool(False, help="submit the engines as a SLURM job (with -N, --gpus-per-node)").tag(config=True)
    nodes = Int(0, help="nodes of the --slurm job").tag(config=True, flags=("-N", "--nodes"))
    gpus_per_node = Int(0, help="GPUs per node of the --slurm job (one rank each)").tag(config=True)
    partition = Unicode("", help="SLURM partition of the --slurm job").tag(config=True)
    time = Unicode("", help="time limit of the --slurm job (SLURM syntax, e.g. 1:00:00)").tag(config=True)
    timeout = Float(120.0, help="seconds to wait for engines and hvd.init()").tag(config=True)
    env = Dict(value_trait=Unicode(), help="environment for the engines (repeatable)").tag(
        config=True, metavar="KEY=VALUE"
    )
    cycle_time = Float(None, allow_none=True, help="HOROVOD_CYCLE_TIME in milliseconds").tag(config=True, metavar="MS")
    fusion_mb = Float(None, allow_none=True, help="Horovod's tensor fusion buffer in MB").tag(config=True, metavar="MB")
    ops = Unicode("auto", help="collective backend: auto (NCCL on GPUs, else MPI), nccl, mpi").tag(config=True)
    oversubscribe = Bool(False, help="allow more ranks than GPUs (ranks share GPUs)").tag(config=True)
    cpu = Bool(False, help="CPU ranks even where GPUs exist").tag(config=True)
    torch_distributed = Bool(
        False,
        help="a torch.distributed process group on every rank too (NCCL on GPUs, Gloo on CPUs, Horovod's ranks), "
        "`dist` in each namespace, for DDP and FSDP2 in cells (a pool without Horovod always has one)",
    ).tag(config=True)
    fail_timeout = Float(
        10.0, help="after an error on some ranks, how long the others may take to stop before the pool restarts"
    ).tag(config=True, metavar="S")
    rest_after = Float(
        None,
        allow_none=True,
        help="seconds without Horovod use after which its background thread stops until the next use, between cells "
        "or within one (awake, it negotiates every 1 ms: 10-15% of a core per rank, a whole core on one rank where "
        "ranks span hosts); 0: never. Default: 2 on CPU ranks, 30 on GPUs",
    ).tag(config=True, metavar="S")
    timeline = Bool(
        False,
        help="only for pools with --cycle-time, --fusion-mb or autotuning: keep Horovod's timeline on for the pool's "
        "life, for %%hvd --timeline (it costs about a quarter of training throughput); other pools need no flag",
    ).tag(config=True)

    # ---- set-up: config only (tag: no flag) ----------------------------------------------------------------------
    stall_check_s = Int(
        10,
        help="HOROVOD_STALL_CHECK_TIME_SECONDS: how long a rank waits in a collective for peers still running before "
        "it shows as stalled (Horovod's stall inspector reads it too)",
    ).tag(config=True, flag=False)
    mpiexec = Unicode(
        "", help="the mpiexec that launches the ranks (default: the one beside this Python, else the PATH's)"
    ).tag(config=True, flag=False)
    launch_agent = Unicode(
        "", help="a command that replaces ssh for mpiexec on other hosts (Open MPI's plm_ssh_agent)"
    ).tag(config=True, flag=False)
    snapshots_kept = Int(
        3, help="snapshots of the kept names kept on disk (%hvd_snapshots), besides tagged ones", min=1
    ).tag(config=True, flag=False)
    tags_kept = Int(
        10, help="tagged snapshots (jupyter_hvd.commit(tag=...)) kept on disk; the oldest goes first, said", min=0
    ).tag(config=True, flag=False)
    check_collectives = Bool(
        True,
        help="before each blocking torch.distributed collective on Gloo, the ranks agree on the call, so tensors of "
        "different sizes are an error naming them instead of a crash in Gloo (one small collective more per call)",
    ).tag(config=True, flag=False)
    warm_start = Bool(
        True,
        help="fork a pool's engines on this host from a process that imported torch, Horovod and ipyparallel when "
        "the extension loaded (a start right after the load runs cold; c.InteractiveShellApp.extensions = "
        "['jupyter_hvd'] loads it with the kernel; kernels with the same Python and import-time environment share "
        "one, JUPYTER_HVD_TEMPLATE_DIR says where); False: every engine imports for itself",
    ).tag(config=True, flag=False)
    live_view = Enum(
        VIEW_MODES,
        "auto",
        help="how %%hvd cells show training: auto (the live widget where the front end draws widgets, else text "
        "with a final plot), widget, text, off (plain text)",
    ).tag(config=True, flag=False)

    # ---- what the options mean ---------------------------------------------------------------------------------

    @property
    def slurm_nodes(self) -> int:
        """Nodes of a SLURM job of the pool's own (0: no such job)."""
        return self.nodes if self.slurm else 0

    def as_dict(self) -> dict[str, Any]:
        """Every option's value (for the pool file)."""
        return {name: getattr(self, name) for name in self.trait_names(config=True)}

    def placed(self, **placement: Any) -> HvdPool:
        """These options with another placement (np, hosts, hostfile, nodes, gpus_per_node: those given and not None),
        for a restart at another size; everything else unchanged. ValueError where the new placement is not valid."""
        changes = {k: v for k, v in placement.items() if v is not None}
        if changes.keys() - {"np", "hosts", "hostfile", "nodes", "gpus_per_node"}:
            raise ValueError(f"not a placement: {', '.join(sorted(changes))}")
        if ("hosts" in changes or "hostfile" in changes or "nodes" in changes) and "np" not in changes:
            changes["np"] = None  # the new hosts' slots (or nodes) decide, as at %hvd_start
        new = HvdPool(**{**self.as_dict(), **changes})
        new.np, new.hosts, _ = slurm.choose_ranks(
            new.np, new.hosts, new.hostfile, new.slurm_nodes, new.gpus_per_node, env={}
        )
        new.validate()
        return new

    def placement(self) -> tuple[Any, ...]:
        """What decides where the ranks run: a restart with another placement is a resize."""
        return (self.np, self.hosts, self.hostfile, self.slurm_nodes, self.gpus_per_node)

    def host_list(self) -> list[Host]:
        """The hosts of -H or --hostfile; [] for a pool on this host (or a SLURM job)."""
        return hosts.pool_hosts(self.hosts, self.hostfile)

    def multi_host(self) -> bool:
        """Whether engines may run on other hosts (then the controller must listen beyond loopback)."""
        return bool(self.hosts or self.hostfile or self.slurm_nodes)

    def validate(self) -> None:
        """Raise ValueError with a message a user can act on."""
        if self.np is None or self.np < 1:
            raise ValueError(f"-np must be at least 1 (got {self.np}): try %hvd_start -np 2")
        if self.timeout <= 0:
            raise ValueError("--timeout must be a positive number of seconds")
        if self.ops == "gloo":
            raise ValueError(
                "--ops gloo is not offered: Horovod 0.28.1's Gloo collectives crash (segfault) under the MPI "
                "controller that MPI engines use. Use --ops mpi (or auto)."
            )
        if self.ops not in OPS:
            raise ValueError(f"--ops must be one of {', '.join(OPS)} (got {self.ops!r})")
        if self.ops == "nccl" and self.cpu:
            raise ValueError("--ops nccl needs GPUs; drop --cpu or use --ops mpi")
        if self.fail_timeout <= 0:
            raise ValueError("--fail-timeout must be a positive number of seconds")
        if self.rest_after is not None and self.rest_after < 0:
            raise ValueError("--rest-after must be 0 (never) or a number of seconds")
        if self.slurm and self.nodes < 1:
            raise ValueError("--slurm needs the number of nodes: %hvd_start --slurm -N 2 --gpus-per-node 4")
        hosts.check_slots(self.host_list(), self.np, self.oversubscribe)
        slurm.check_options(self)
        cores = os.cpu_count() or 1
        if not self.multi_host() and not self.oversubscribe and self.np > cores * CPU_RANKS_PER_CORE:
            limit = cores * CPU_RANKS_PER_CORE
            raise ValueError(
                f"-np {self.np} asks for more ranks than this host runs: {cores} cores x {CPU_RANKS_PER_CORE} = "
                f"{limit} ranks at most. Use -np {min(limit, 2 * cores)}, name other hosts with -H, or add "
                "--oversubscribe if you mean it."
            )

    def horovod_env(self) -> dict[str, str]:
        """Environment the engines read before `hvd.init()`: Horovod's knobs, then the user's --env."""
        env = {
            # Horovod's stall inspector names the tensors a rank waits on; we read its report on failures.
            "HOROVOD_STALL_CHECK_TIME_SECONDS": str(self.stall_check_s),
        }
        if self.cycle_time is not None:
            env["HOROVOD_CYCLE_TIME"] = f"{self.cycle_time:g}"
        if self.fusion_mb is not None:
            env["HOROVOD_FUSION_THRESHOLD"] = str(int(self.fusion_mb * 1024 * 1024))
        if self.ops == "mpi":
            env["HOROVOD_CPU_OPERATIONS"] = "mpi"
            env["HOROVOD_GPU_OPERATIONS"] = "MPI"
        env.update(self.env)
        if self.timeline and not self.can_rest(env):
            # `%%hvd --timeline` starts Horovod again with HOROVOD_TIMELINE=DYNAMIC for its cell only; a pool that
            # cannot restart Horovod needs it from the start, at about 27% of training throughput (bench/throughput.py).
            env.setdefault("HOROVOD_TIMELINE", "DYNAMIC")
        return env

    def can_rest(self, env: dict[str, str] | None = None) -> bool:
        """Whether this pool's Horovod may rest when idle (the engines decide alike, from the same environment)."""
        return wire.can_rest({**os.environ, **(self.horovod_env() if env is None else env)})


# ---- %hvd_start's parser, from the traits ----------------------------------------------------------------------


def _flags(name: str, trait: TraitType) -> tuple[str, ...]:
    return tuple(trait.metadata.get("flags") or (f"--{name.replace('_', '-')}",))


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--env expects KEY=VALUE (got {text!r})")
    return key, value


def start_arguments(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add one `%hvd_start` argument per flag option of HvdPool (under IPython's @magic_arguments)."""
    for name, trait in reversed(list(_flag_traits())):
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": trait.help.replace("%", "%%")}
        if trait.metadata.get("metavar"):
            kwargs["metavar"] = trait.metadata["metavar"]
        if isinstance(trait, Bool):
            kwargs["action"] = argparse.BooleanOptionalAction
        elif isinstance(trait, Dict):
            kwargs.update(action="append", type=_env_pair)
        elif isinstance(trait, Int):
            kwargs["type"] = int
        elif isinstance(trait, Float):
            kwargs["type"] = float
        func = argument(*_flags(name, trait), **kwargs)(func)
    return func


def _flag_traits() -> list[tuple[str, TraitType]]:
    """The options that are %hvd_start flags, in the order they are declared."""
    return [
        (name, trait)
        for name, trait in vars(HvdPool).items()
        if isinstance(trait, TraitType) and trait.metadata.get("config") and trait.metadata.get("flag", True)
    ]


def config_table() -> str:
    """A Markdown table of the set-up settings that are config only (the README's table is this text)."""
    rows = ["| setting | what it does |", "| --- | --- |"]
    for name, trait in vars(HvdPool).items():
        if isinstance(trait, TraitType) and trait.metadata.get("flag", True) is False:
            default = "" if "default" in trait.help else f" (default: {trait.default_value!r})"
            rows.append(f"| `c.HvdPool.{name}` | {trait.help.replace('|', '/')}{default} |")
    return "\n".join(rows)


def options_from(args: argparse.Namespace, shell: Any = None) -> HvdPool:
    """The pool's options: the flags given, then config, then the defaults."""
    given = {name: getattr(args, name) for name, _ in _flag_traits() if getattr(args, name, None) is not None}
    if "env" in given:
        given["env"] = dict(given["env"])
    return HvdPool(config=current_config(shell), **given)


def setting(name: str, shell: Any = None) -> Any:
    """The value of one option as configured now (for settings read at each cell, like live_view)."""
    value = _deprecated(name, defaults(shell).config)
    return getattr(defaults(shell), name) if value is None else value


# ---- config ----------------------------------------------------------------------------------------------------

_defaults: HvdPool | None = None  # this kernel's configured defaults; %config HvdPool.x = y updates them


def defaults(shell: Any = None) -> HvdPool:
    """The configured defaults of this kernel's pools, read once; registered with the shell so `%config` updates
    them."""
    global _defaults
    if _defaults is None:
        _defaults = HvdPool(config=load_config(shell))
    # Registered by the first call that has the shell, which need not be the first call (find_mpiexec() has none).
    if shell is not None and hasattr(shell, "configurables") and _defaults not in shell.configurables:
        shell.configurables.append(_defaults)
    return _defaults


def current_config(shell: Any = None) -> Config:
    """The defaults' config now, with the deprecated environment variables where config does not set them."""
    config = Config()
    config.merge(defaults(shell).config)
    for name in DEPRECATED_ENV.values():
        value = _deprecated(name, config)
        if value is not None:
            config.HvdPool[name] = value
    return config


def _deprecated(name: str, config: Config) -> str | None:
    """The value of the deprecated environment variable for option `name`, where it is set and config does not set
    the option (with a warning, once per variable)."""
    for variable, option in DEPRECATED_ENV.items():
        value = os.environ.get(variable) if option == name else None
        if value and name not in config.get("HvdPool", {}):
            if variable not in _warned:
                _warned.add(variable)
                warnings.warn(
                    f"{variable} is deprecated and will be ignored from the next release: set c.HvdPool.{name} = "
                    f"{value!r} in {CONFIG_FILE}.py (or %config HvdPool.{name} = {value!r}) instead.",
                    FutureWarning,
                    stacklevel=4,
                )
            return value
    return None


_warned: set[str] = set()


def load_config(shell: Any = None) -> Config:
    """c.HvdPool from jupyter_hvd_config.{json,py} in Jupyter's config directories, then from the IPython shell's
    config (ipython_kernel_config.py)."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

    config = Config()
    for directory in reversed(jupyter_config_path()):  # the most specific directory comes first: it must win
        for loader, suffix in ((JSONFileConfigLoader, ".json"), (PyFileConfigLoader, ".py")):
            path = Path(directory) / f"{CONFIG_FILE}{suffix}"
            if path.is_file():
                config.merge(loader(path.name, str(path.parent)).load_config())
    shell_config = getattr(shell, "config", None)
    if isinstance(shell_config, Config) and "HvdPool" in shell_config:
        config.merge(Config({"HvdPool": shell_config.HvdPool}))
    return config
