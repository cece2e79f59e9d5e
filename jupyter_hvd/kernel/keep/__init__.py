"""What a pool keeps across restarts, in the user's kernel: the setup journal and kept names (journal), their
snapshots (snapshots), a snapshot loaded into the ranks (restore), what comes back after a restart (bring_back), and
the notebook's training as a script (export)."""
