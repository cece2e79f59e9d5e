"""What every rank has before the first cell, on the engines and in a script exported by `%hvd_export`: MPI and
Horovod initialised (where Horovod is installed), a torch.distributed process group where one was asked for (or where
Horovod is not installed), the rank pinned to its device, and the names cells use.

`prelude` is self-contained on purpose (only the standard library, torch, Horovod and mpi4py, imported inside it; no
room of jupyter-hvd's): `%hvd_export` copies its source into the script (inspect.getsource), so a script and the
notebook's engines start alike. The same script
runs under `mpirun -np N` (ranks from MPI) and, for torch.distributed alone, under `torchrun --nproc-per-node N`
(ranks from torchrun's environment).
"""

from __future__ import annotations

from typing import Any


def prelude(device: str = "auto", torch_distributed: bool = False, store: Any = None) -> dict[str, Any]:
    """Initialise MPI and Horovod, and torch.distributed where asked (or where Horovod is missing); pin this rank to
    its device; the names cells use: hvd (None without Horovod), dist (None without a process group), torch, rank,
    size, local_rank, device.

    `device`: "auto" (GPU `local_rank` where CUDA is present, else CPU) or "cpu". `store`: the pool's rendezvous for
    torch.distributed ({"file": path} on one host; between hosts a callable that makes the store the kernel serves,
    given the timeout); None in a script (torchrun's environment, or MPI).
    """
    import datetime
    import os
    import signal

    import torch

    # The threads Horovod and torch.distributed start here (Horovod's background loop, Gloo's workers and socket
    # loop) inherit this thread's signal mask: with SIGINT blocked they never take an interrupt meant for the cell,
    # which would break the system call they are in (a socket read) and leave their group out of step.
    outer_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        torchrun = "TORCHELASTIC_RUN_ID" in os.environ or (
            "RANK" in os.environ and "OMPI_COMM_WORLD_RANK" not in os.environ
        )
        hvd: Any = None
        if not torchrun:
            # mpi4py initialises MPI (thread level MULTIPLE) before hvd.init(), so Horovod leaves MPI's lifetime to it.
            from mpi4py import MPI

            try:
                import horovod.torch as hvd  # type: ignore[no-redef]
            except ImportError:
                hvd = None
        if hvd is not None:
            if not hvd.is_initialized():
                hvd.init()
            rank, size, local_rank, local_size = hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()
        elif torchrun:
            rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            local_rank, local_size = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", size))
        else:
            world = MPI.COMM_WORLD
            host = world.Split_type(MPI.COMM_TYPE_SHARED)
            rank, size, local_rank, local_size = world.Get_rank(), world.Get_size(), host.Get_rank(), host.Get_size()
        if device == "auto" and torch.cuda.is_available():
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
            dev = torch.device("cuda", torch.cuda.current_device())
        else:
            # N ranks on one host share its cores: one rank's intra-op threads must not starve the others.
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            torch.set_num_threads(max(1, cores // local_size))
            dev = torch.device("cpu")
        dist: Any = None
        if torch_distributed or hvd is None:
            import torch.distributed as dist

            if not dist.is_initialized():
                backend = "nccl" if dev.type == "cuda" and dist.is_nccl_available() else "gloo"
                timeout = datetime.timedelta(minutes=30)
                kwargs: dict[str, Any] = {"device_id": dev} if backend == "nccl" else {}
                if torchrun:
                    dist.init_process_group(backend, timeout=timeout, **kwargs)
                else:
                    if store is None:  # a script under mpirun: rank 0 serves the rendezvous on a port it picks
                        import socket

                        port = 0
                        if rank == 0:
                            with socket.socket() as s:
                                s.bind(("", 0))
                                port = s.getsockname()[1]
                        store = {
                            "host": MPI.COMM_WORLD.bcast(socket.gethostname(), 0),
                            "port": MPI.COMM_WORLD.bcast(port, 0),
                        }
                    if callable(store):  # between hosts: the kernel serves it to this pool only (not scripts)
                        rendezvous = store(timeout)
                    elif store.get("file"):
                        # One host: Gloo's and NCCL's sockets on loopback only, whatever the environment said (the
                        # kernel tells the user when it overrides a setting of theirs).
                        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = "lo"
                        rendezvous = dist.FileStore(store["file"], size)
                    else:  # a script under mpirun: served by rank 0
                        host, port = store["host"], int(store["port"])
                        rendezvous = dist.TCPStore(host, port, size, is_master=rank == 0, timeout=timeout)
                    dist.init_process_group(
                        backend, store=rendezvous, rank=rank, world_size=size, timeout=timeout, **kwargs
                    )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, outer_mask)
    return {
        "hvd": hvd,
        "dist": dist,
        "torch": torch,
        "rank": rank,
        "size": size,
        "local_rank": local_rank,
        "device": dev,
    }
