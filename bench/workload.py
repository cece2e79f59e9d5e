"""The training workload shared by the notebook cell and the mpirun script: same model, data and loop.

The body runs with `hvd`, `torch`, `rank`, `size` and `device` defined (as in a %%hvd cell): on a GPU pool the
model and data live on each rank's GPU and Horovod reduces with NCCL; on CPU ranks with MPI. Each timed window
prints one line `RESULT {...}` on rank 0 with samples/s measured after a warm-up, between two barriers.
"""

SETUP = """
import json, time
import torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10))
model = model.to(device)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
g = torch.Generator().manual_seed(rank)
batch = 64
data = [(torch.randn(batch, 1, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(8)]
data = [(x.to(device), y.to(device)) for x, y in data]
"""

TRAIN = """
def step(i):
    x, y = data[i % len(data)]
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss
for i in range(5):
    step(i)
hvd.allreduce(torch.zeros(1), name="bench.start")
t0 = time.perf_counter()
for i in range(STEPS):
    loss = step(i)
    if rank == 0 and PRINT_EVERY and i % PRINT_EVERY == 0:
        print(f"step {i} loss={loss.item():.4f}", flush=True)
hvd.allreduce(torch.zeros(1), name="bench.end")
seconds = time.perf_counter() - t0
bench_result = {"samples_per_s": STEPS * batch * size / seconds, "seconds": seconds}
if rank == 0:
    print("RESULT " + json.dumps(bench_result), flush=True)
"""


def window(steps: int, print_every: int) -> str:
    """One timed window of training, as the body of a %%hvd cell (after SETUP ran in an earlier cell)."""
    return TRAIN.replace("STEPS", str(steps)).replace("PRINT_EVERY", str(print_every))


def script(steps: int, print_every: int, windows: int) -> str:
    """The workload as a script for `mpirun -np N python script.py`: set up once, then `windows` timed windows.

    Before each window rank 0 waits for a line on stdin, so a benchmark can interleave the script's windows with
    a notebook's cells while both sets of processes stay alive (it suspends whichever is not being timed).
    """
    head = (
        "import sys\nfrom mpi4py import MPI\nimport torch\nimport horovod.torch as hvd\nhvd.init()\n"
        "rank, size = hvd.rank(), hvd.size()\n"
        "import os\ntorch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // hvd.local_size()))\n"
        # As a pool pins its ranks (engine/bootstrap.py): GPU local_rank where there are GPUs.
        "device = torch.device('cuda', hvd.local_rank()) if torch.cuda.is_available() else torch.device('cpu')\n"
        "if device.type == 'cuda':\n    torch.cuda.set_device(device)\n"
    )
    body = "\n".join("    " + line for line in window(steps, print_every).strip().splitlines())
    loop = (
        f"for w in range({windows}):\n"
        "    if rank == 0:\n        sys.stdin.readline()\n"
        "    hvd.allreduce(torch.zeros(1), name=f'bench.go.{w}')\n" + body + "\n"
    )
    return head + SETUP + loop


# The same model and loop with torch's DistributedDataParallel on the pool's torch.distributed process group
# (`%hvd_start --torch-distributed`), and as a script for `torchrun --nproc-per-node N`.
SETUP_DDP = SETUP.replace(
    """opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)""",
    """from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9)""",
)


def window_ddp(steps: int, print_every: int) -> str:
    """One timed window of DDP training, as the body of a %%hvd cell (after SETUP_DDP ran)."""
    return (
        window(steps, print_every)
        .replace('hvd.allreduce(torch.zeros(1), name="bench.start")', "dist.barrier()")
        .replace('hvd.allreduce(torch.zeros(1), name="bench.end")', "dist.barrier()")
    )


def script_ddp(steps: int, print_every: int, windows: int) -> str:
    """The DDP workload as a script for `torchrun --nproc-per-node N script.py`, gated like `script()`."""
    head = (
        "import sys, os\nimport torch\nimport torch.distributed as dist\n"
        "backend = 'nccl' if torch.cuda.is_available() else 'gloo'\n"
        "dist.init_process_group(backend)\nrank, size = dist.get_rank(), dist.get_world_size()\n"
        "local = int(os.environ.get('LOCAL_RANK', 0))\n"
        "torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(os.environ.get('LOCAL_WORLD_SIZE', 1))))\n"
        "device = torch.device('cuda', local) if torch.cuda.is_available() else torch.device('cpu')\n"
        "if device.type == 'cuda':\n    torch.cuda.set_device(device)\n"
    )
    body = "\n".join("    " + line for line in window_ddp(steps, print_every).strip().splitlines())
    loop = (
        f"for w in range({windows}):\n"
        "    if rank == 0:\n        sys.stdin.readline()\n"
        "    dist.barrier()\n" + body + "\n"
    )
    return head + SETUP_DDP + loop
