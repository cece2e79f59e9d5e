"""Where and how ranks start, in the user's kernel: a pool's options (options), its hosts and SLURM job (hosts,
slurm, placement), its processes (launcher), the record of what runs (pool), the pool file the sidebar reads
(pool_file), and the rendezvous a multi-host process group joins (rendezvous)."""
