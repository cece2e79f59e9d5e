"""The notebook's verbs: %hvd_start, %%hvd, %hvd_push, %hvd_pull, %hvd_status, %hvd_restart, %hvd_keep, %hvd_where,
%hvd_debug, %hvd_snapshots, %hvd_rewind, %hvd_setup, %hvd_export, %hvd_stop."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.inputtransformer2 import TransformerManager
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import TraitError

from ..widgets import view_for_cell
from . import transfer as hvd_transfer
from .cell.run import CellOptions, next_number
from .diagnose import debugger as hvd_debugger
from .diagnose import profile as hvd_profile
from .diagnose import timeline as hvd_timeline
from .diagnose import where as hvd_where
from .errors import PoolError, syntax_error_lines
from .failures import PoolLost
from .keep import export
from .keep.service import Keep
from .launch import slurm
from .launch.options import options_from, setting, start_arguments
from .launch.pool import Pool
from .owner import owner
from .ranks import parse_ranks
from .words import size_text

_transform = TransformerManager()


HELP_FLAGS = {"--help", "-h"}


def _parse(magic: Any, line: str) -> Any:
    """The magic's arguments; None after printing its help when asked with --help or -h (as `%magic?` does)."""
    if HELP_FLAGS & set(line.split()):
        print(magic.__doc__)  # what `%magic?` shows: the docstring, usage and options
        return None
    return parse_argstring(magic, line)


def options_table(magic: Any) -> str:
    """A Markdown table of a magic's options, from its parser (the README's tables are this text)."""
    rows = ["| option | what it does |", "| --- | --- |"]
    for action in magic.parser._actions:
        if not action.option_strings:
            continue
        flag = " / ".join(f"`{o}`" for o in action.option_strings)
        if action.metavar:
            flag += f" {action.metavar}"
        rows.append(f"| {flag} | {(action.help or '').replace('%%', '%').replace('|', '/')} |")
    return "\n".join(rows)


class CellSyntaxError(UsageError):
    """A `%%hvd` cell that does not parse, shown as a plain cell's SyntaxError: the line, a caret, the message."""

    def __init__(self, exc: SyntaxError, count: int | None = None) -> None:
        super().__init__(str(exc))
        self.exc = exc
        self.count = count

    def _render_traceback_(self) -> list[str]:
        return syntax_error_lines(self.exc, self.count)


def _prompt(shell: Any) -> int | None:
    """The number of the notebook cell running now, as its prompt shows it (In[4]). IPython 9 counts on before the
    cell runs (its execution_count is then the next cell's); the history has stored this cell as number N in both."""
    history = getattr(shell, "history_manager", None)
    stored = len(getattr(history, "input_hist_raw", None) or [])
    return stored - 1 if stored > 1 else getattr(shell, "execution_count", None)


def _cell_id(shell: Any) -> str:
    """The front end's id of the notebook cell running now ('' where it sends none: a terminal, nbclient < 0.6)."""
    kernel = getattr(shell, "kernel", None)
    parent = kernel.get_parent() if kernel is not None else None
    return str(((parent or {}).get("metadata") or {}).get("cellId") or "")


def require_pool() -> Pool:
    """The running pool, or a UsageError telling the user how to start one."""
    pool = owner.pool
    if pool is not None and pool.stopped:
        raise UsageError("The pool was stopped (its restart failed). Type %hvd_restart to start it again.")
    if pool is None or pool.view is None:
        raise UsageError(f"No jupyter-hvd pool is running{_last_words()}. Start one first: %hvd_start -np 2")
    if pool.busy_cell is None:  # said here too: a line magic may come first
        owner.notices.say()
    return pool


def _last_words() -> str:
    """Why the last pool ended, where it ended outside any cell, as ' (...)'; else ''."""
    why = owner.notices.last_words
    return f" ({why})" if why else ""


@magics_class
class HvdMagics(Magics):
    """Horovod data-parallel training on an MPI engine pool, from notebook cells."""

    @property
    def user_ns(self) -> dict[str, Any]:
        """The notebook's namespace."""
        assert self.shell is not None  # magics are always registered with their shell
        return self.shell.user_ns

    @line_magic
    @magic_arguments()
    @start_arguments
    def hvd_start(self, line: str) -> None:
        """Start an engine pool under MPI: one engine per rank, Horovod initialised, device pinned.

        Each engine's namespace then holds hvd, torch, rank, size, local_rank and device. Every option's default can
        be set as c.HvdPool.<option> in jupyter_hvd_config.py, or with %config HvdPool.<option> = ...
        """
        args = _parse(self.hvd_start, line)
        if args is None:
            return None
        existing = owner.pool
        if existing is not None and not existing.stopped:
            raise UsageError(
                f"A pool of {existing.options.np} ranks is already running. "
                "Use %hvd_restart to restart it, or %hvd_stop and then %hvd_start."
            )
        try:
            options = options_from(args, self.shell)
            options.np, options.hosts, note = slurm.choose_ranks(
                options.np, options.hosts, options.hostfile, options.slurm_nodes, options.gpus_per_node
            )
            options.validate()
        except (ValueError, TraitError) as exc:
            raise UsageError(str(exc)) from None
        if note:
            print(note, flush=True)
        if options.timeline and "HOROVOD_TIMELINE" not in options.horovod_env():
            print("--timeline is not needed: %%hvd --timeline works on this pool as it is (ignored).", flush=True)
        t0 = time.monotonic()
        print(f"Starting {options.np} ranks under mpiexec...", flush=True)
        if existing is not None:  # stopped by a failed restart: its setup journal and snapshots come back
            pool, came_back = owner.restart(existing, options=options)
            print(
                f"Pool ready in {time.monotonic() - t0:.1f} s: {options.np} ranks, {pool.initialised()}; {came_back}."
            )
        else:
            pool = owner.start(options)
            print(f"Pool ready in {time.monotonic() - t0:.1f} s: {options.np} ranks, {pool.initialised()}.")
        print(pool.table())

    @cell_magic
    @magic_arguments()
    @argument("--ranks", default="0", help="whose output to show: 0 (default), all, or a list like 0,2")
    @argument("--log-lines", type=int, default=10_000, metavar="N", help="lines of output shown per rank and cell")
    @argument(
        "--plot",
        default="all",
        metavar="METRICS",
        help="metrics plotted live: all (default; a panel per metric, val_ and test_ ones beside theirs) or loss,acc",
    )
    @argument("--no-plot", action="store_true", help="live log and status only, no plot")
    @argument("--batch-size", type=int, default=None, metavar="N", help="samples per step per rank, for samples/s")
    @argument(
        "--setup",
        action="store_true",
        help="a setup cell: once it succeeds on every rank it is replayed after every restart (%%hvd_setup lists them; "
        "running the same notebook cell again replaces its entry)",
    )
    @argument(
        "--timeline",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="record Horovod's timeline for this cell and summarise it (trace file: PATH, else hvd_timelines/)",
    )
    @argument(
        "--profile",
        nargs="?",
        const="",
        default=None,
        metavar="FOLDER",
        help="record this cell with torch.profiler on every rank and show where the time went (traces: FOLDER, else "
        "hvd_profiles/)",
    )
    @argument(
        "--where-full",
        action="store_true",
        help="where the ranks are (at the stop button, or a stall) with library frames too",
    )
    def hvd(self, line: str, cell: str) -> Any:
        """Run this cell on every rank (SPMD); rank 0's output streams in live.

        The cell ends when every rank has finished. An error on some ranks is shown once, with the ranks
        that raised it; ranks left waiting in a collective are released, so the pool stays usable.
        """
        args = _parse(self.hvd, line)
        if args is None:
            return None
        source = _transform.transform_cell(cell)
        try:  # before anything is shipped
            compile(source, "<hvd cell>", "exec")
        except SyntaxError as exc:
            raise CellSyntaxError(exc, _prompt(self.shell)) from None
        pool = require_pool()
        try:
            show = parse_ranks(args.ranks, len(pool.ranks))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if args.log_lines < 1:
            raise UsageError("--log-lines must be at least 1")
        plots = [] if args.no_plot else [p.strip() for p in args.plot.split(",") if p.strip()]
        view = view_for_cell(
            self.shell, len(pool.ranks), show, args.log_lines, plots, args.batch_size, setting("live_view", self.shell)
        )
        options = CellOptions(
            show_ranks=show,
            log_lines=args.log_lines,
            view=view,
            count=_prompt(self.shell),
            cell_id=_cell_id(self.shell),
            setup=args.setup,
            where_full=args.where_full,
        )
        if args.timeline is not None:
            if pool.backends.timeline_missing():
                raise UsageError(pool.backends.timeline_missing())
            return hvd_timeline.record(pool, args.timeline, lambda: owner.run_cell(pool, source, options))
        if args.profile is not None:
            return hvd_profile.record(pool, args.profile, lambda: owner.run_cell(pool, source, options))
        return owner.run_cell(pool, source, options)

    @line_magic
    @magic_arguments()
    @argument("names", nargs="*", help="notebook variables to send (functions, classes, models and tensors too)")
    @argument(
        "--timeout", type=float, default=None, metavar="S", help="seconds to wait (default: the pool's --timeout)"
    )
    def hvd_push(self, line: str) -> None:
        """%hvd_push NAME [NAME ...]: send notebook variables to every rank (same names there), by value.

        Functions, lambdas, closures and classes defined in the notebook travel with their code; tensors and arrays
        without copies. A value that cannot be sent is named with the reason, and nothing is sent.
        """
        args = _parse(self.hvd_push, line)
        if args is None:
            return None
        pool = require_pool()
        names = args.names
        if not names:
            raise UsageError("Name the variables to send: %hvd_push model_config lr")
        missing = [n for n in names if n not in self.user_ns]
        if missing:
            raise UsageError(f"Not defined in this notebook: {', '.join(missing)}")
        try:
            payload = hvd_transfer.push(pool, {n: self.user_ns[n] for n in names}, args.timeout)
        except hvd_transfer.TransferError as exc:
            raise UsageError(str(exc)) from None
        try:
            Keep(pool).journal_push(payload, _prompt(self.shell), _cell_id(self.shell))
        except OSError as exc:
            print(
                f"jupyter-hvd: pushed, but {', '.join(names)} could not be kept for a replay after a restart "
                f"({exc.strerror or exc}): push again after a restart.",
                file=sys.stderr,
            )

    @line_magic
    @magic_arguments()
    @argument("name", help="variable to fetch from the ranks' namespace")
    @argument("--rank", type=int, default=0, help="which rank to fetch it from (default 0)")
    @argument(
        "--timeout", type=float, default=None, metavar="S", help="seconds to wait (default: the pool's --timeout)"
    )
    def hvd_pull(self, line: str) -> Any:
        """Fetch a variable from one rank (default rank 0) into the notebook, under the same name, by value.

        Objects of classes defined in %%hvd cells (models included) arrive with their class. A big value's size is
        shown before it moves. A failure, a dead or stopped rank, or Ctrl-C leaves the notebook unchanged.
        """
        args = _parse(self.hvd_pull, line)
        if args is None:
            return None
        pool = require_pool()
        if not 0 <= args.rank < len(pool.ranks):
            raise UsageError(f"--rank {args.rank}: the pool has ranks 0-{len(pool.ranks) - 1}")
        try:
            value = hvd_transfer.pull(pool, args.name, args.rank, args.timeout)
        except hvd_transfer.TransferError as exc:
            raise UsageError(str(exc)) from None
        self.user_ns[args.name] = value

    @line_magic
    @magic_arguments()
    def hvd_status(self, line: str = "") -> None:
        """Show the pool: its options and every rank with its host, pid, device and state."""
        if _parse(self.hvd_status, line) is None:
            return
        pool = owner.pool
        if pool is None:
            print(f"No jupyter-hvd pool is running{_last_words()}. Start one with %hvd_start -np 2")
            return
        if pool.stopped:
            print("The pool is stopped (its restart failed). %hvd_restart starts it again with the same options.")
            return
        dead = set(pool.dead_ranks())
        for r in pool.ranks:
            if r.rank in dead:
                r.state = "dead"
        up = time.time() - pool.started_at
        print(f"Pool {pool.id}: {pool.options.np} ranks, up {up:.0f} s, {pool.cells_run} cells run")
        if pool.resting:
            print("Horovod is resting while the pool is idle (no busy-waiting); the next %%hvd cell starts it again.")
        elif not pool.can_rest():
            print(
                "Horovod stays awake while the pool is idle (--cycle-time, --fusion-mb or autotuning: Horovod 0.28.1 "
                "cannot start again after a shutdown with those), so idle ranks keep cores busy."
            )
        print(pool.table())
        if pool.keeper.journal:
            print(
                f"Setup journal: {len(pool.keeper.journal)} entries, replayed after a restart (%hvd_setup lists them)."
            )
        if pool.keeper.names:
            print(pool.keeper.listing())
            print(f"Snapshots on disk: {size_text(pool.disk_used())} (%hvd_snapshots lists them).")
        dropped = pool.channel.dropped_text() if pool.channel is not None else ""
        if dropped:
            print(dropped)
        for problem in pool.problems()[:5]:
            print(f"problem: {problem.splitlines()[0][:200]}")

    @line_magic
    @magic_arguments()
    @argument("--fresh", action="store_true", help="start empty: forget the setup journal and the kept names")
    @argument("-np", type=int, default=None, help="another number of ranks: the pool is resized, the work kept")
    @argument("-H", "--hosts", default=None, metavar="HOST:SLOTS,...", help="other hosts for the ranks")
    @argument("--hostfile", default=None, metavar="FILE", help="another Open MPI hostfile")
    @argument("-N", "--nodes", type=int, default=None, help="another number of nodes of the --slurm job")
    @argument("--gpus-per-node", type=int, default=None, help="other GPUs per node of the --slurm job")
    def hvd_restart(self, line: str = "") -> None:
        """Restart every engine: Horovod is initialised again, the setup cells are replayed and the kept names
        restored (with --fresh, nothing comes back). With -np (or other hosts) the pool comes back at that size:
        the setup cells run at the new size, and the kept state is laid out for the new ranks."""
        args = _parse(self.hvd_restart, line)
        if args is None:
            return
        pool = owner.pool
        if pool is None:
            raise UsageError("No jupyter-hvd pool is running. Start one first: %hvd_start -np 2")
        options = None
        placement = {
            "np": args.np,
            "hosts": args.hosts,
            "hostfile": args.hostfile,
            "nodes": args.nodes,
            "gpus_per_node": args.gpus_per_node,
        }
        if any(v is not None for v in placement.values()):
            try:
                options = pool.options.placed(**placement)
            except (ValueError, TraitError) as exc:
                raise UsageError(f"{exc} The pool runs on as it was.") from None
        t0 = time.monotonic()
        was = len(pool.ranks) or pool.np
        try:
            pool, came_back = owner.restart(pool, fresh=args.fresh, options=options)
        except KeyboardInterrupt:
            now = owner.pool
            raise PoolError(now.interrupted_restart() if now is not None else "The restart was interrupted.") from None
        size = f" on {pool.np} ranks (it had {was})" if pool.np != was else ""
        print(f"Pool restarted{size} in {time.monotonic() - t0:.1f} s: {came_back}.")
        print(pool.table())

    @line_magic
    @magic_arguments()
    @argument("names", nargs="*", help="names of the ranks' namespaces to keep (models, optimizers, any value)")
    @argument("--forget", action="store_true", help="stop keeping the names given")
    def hvd_keep(self, line: str = "") -> None:
        """Keep names of the ranks' namespaces across restarts: snapshotted on rank 0 at the end of every successful
        %%hvd cell (and at each jupyter_hvd.commit() in a cell), restored on every rank after a restart.

        Torch modules and optimizers are kept by state_dict, anything else by value. With no names: what is kept,
        and how old the last snapshot is.
        """
        args = _parse(self.hvd_keep, line)
        if args is None:
            return
        pool = require_pool()
        keep = Keep(pool)
        if args.forget:
            unknown = keep.forget(args.names)
            if unknown:
                print(f"Not kept: {', '.join(unknown)}.")
        elif args.names:
            keep.keep(args.names, _prompt(self.shell))
        else:
            with pool.lock:
                keep.settle()
        keep.say_news()
        print(pool.keeper.listing())

    @line_magic
    @magic_arguments()
    @argument("--full", action="store_true", help="library frames too")
    def hvd_where(self, line: str = "") -> None:
        """Where every rank is now: the cell line and function, the collective it waits in, identical places
        grouped; a rank that cannot answer (frozen, or busy in native code) is named, with the stack read from
        outside."""
        args = _parse(self.hvd_where, line)
        if args is None:
            return
        pool = require_pool()
        with pool.lock:
            print(hvd_where.report(pool, "%hvd_where asked", args.full))

    @line_magic
    @magic_arguments()
    @argument("--rank", type=int, default=None, help="the rank to debug (default: the first that raised)")
    def hvd_debug(self, line: str = "") -> None:
        """Open pdb on a rank, in the frame where its last failed %%hvd cell raised; type pdb's commands in the input
        box, q leaves (as IPython's %debug)."""
        args = _parse(self.hvd_debug, line)
        if args is None:
            return
        pool = require_pool()
        rank = args.rank if args.rank is not None else (pool.last_failed[0] if pool.last_failed else None)
        if rank is None:
            raise UsageError("No %%hvd cell has failed on this pool: %hvd_debug --rank R opens pdb there anyway.")
        if not 0 <= rank < len(pool.ranks):
            raise UsageError(f"--rank {rank}: the pool has ranks 0-{len(pool.ranks) - 1}")
        with pool.lock:
            hvd_debugger.post_mortem(pool, rank, next_number())

    @line_magic
    @magic_arguments()
    def hvd_snapshots(self, line: str = "") -> None:
        """List the snapshots of the kept names: number, where they were taken, age, size, names and tags."""
        if _parse(self.hvd_snapshots, line) is None:
            return
        print(Keep(require_pool()).listing())

    @line_magic
    @magic_arguments()
    @argument(
        "snapshot", nargs="?", default=None, help="the number %%hvd_snapshots shows, or a tag (default: the newest)"
    )
    def hvd_rewind(self, line: str = "") -> None:
        """Load a snapshot of the kept names into the running pool, without a restart: every rank gets its own state
        back as it was then (e.g. from before the learning rate blew the loss up)."""
        args = _parse(self.hvd_rewind, line)
        if args is None:
            return
        pool = require_pool()
        keep = Keep(pool)
        if not pool.keeper.names:
            raise UsageError("Nothing is kept: %hvd_keep NAME [NAME ...] first.")
        try:
            generation = keep.find(args.snapshot)
        except LookupError as exc:
            raise UsageError(f"%hvd_rewind {args.snapshot}: {exc}. %hvd_snapshots lists them.") from None
        if generation is None:
            raise UsageError("There is no snapshot yet: one is taken at the end of the next successful %%hvd cell.")
        try:
            said = keep.rewind(generation)
        except PoolLost as lost:
            raise PoolError(f"The rewind lost the pool. {owner.after_loss(pool, lost.failure.message)}") from None
        print(f"Rewound to snapshot #{generation.number}: {said}.")

    @line_magic
    @magic_arguments()
    @argument("--remove", type=int, default=None, metavar="N", help="remove entry N of the journal")
    @argument("--clear", action="store_true", help="empty the journal")
    def hvd_setup(self, line: str = "") -> None:
        """The setup journal: the %%hvd --setup cells replayed, in order, after every restart of the pool."""
        args = _parse(self.hvd_setup, line)
        if args is None:
            return
        keeper = require_pool().keeper
        if args.clear:
            keeper.journal.clear()
        elif args.remove is not None:
            try:
                keeper.remove(args.remove)
            except IndexError as exc:
                raise UsageError(f"--remove {args.remove}: {exc}") from None
        print(keeper.journal_listing())

    @line_magic
    @magic_arguments()
    @argument("path", help="the script to write, e.g. train.py")
    @argument("--sbatch", action="store_true", help="also write a SLURM batch script for it (PATH with .sbatch)")
    def hvd_export(self, line: str = "") -> None:
        """Write the pool's training as one script for `mpirun -np N python PATH` (or horovodrun): the engines'
        prelude, the setup cells, then the other %%hvd cells that succeeded, in the order they ran."""
        args = _parse(self.hvd_export, line)
        if args is None:
            return
        pool = require_pool()
        notebook = os.environ.get("JPY_SESSION_NAME", "")
        written, left_out = export.write(
            args.path,
            pool.keeper,
            pool.options,
            args.sbatch,
            pool.pushed_dir,
            notebook,
            pool.backends.torch_distributed,
        )
        entries = len(pool.keeper.journal) + sum(not c.setup for c in pool.keeper.cells)
        print(
            f"Wrote {written[0]} ({entries} entries). Run it with: {export.launch_line(pool.options, str(written[0]))}"
        )
        if pool.backends.torch_distributed:
            print(f"  or, if its cells do not use Horovod: {export.torchrun_line(pool.options, str(written[0]))}")
        for path in written[1:]:
            if path.suffix == ".sbatch":
                print(f"Wrote {path}: sbatch {path}")
            else:
                print(f"Wrote {path}: the pushed values, which the script loads from beside it")
        if left_out:
            print("Not exported (they need IPython; left as comments in the script):")
            for what in left_out:
                print(f"  {what}")

    @line_magic
    @magic_arguments()
    def hvd_stop(self, line: str = "") -> None:
        """Stop the pool: engines, mpiexec and controller all exit."""
        if _parse(self.hvd_stop, line) is None:
            return
        pool = owner.pool
        if pool is None:
            print("No jupyter-hvd pool is running.")
            return
        owner.stop(pool)
        print("Pool stopped.")
