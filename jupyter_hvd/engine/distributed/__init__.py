"""torch.distributed on a rank: its collectives and DDP's timed for the pool (hooks), and the multi-host rendezvous
only the pool's ranks can join (rendezvous)."""
