"""What is wrong or slow, in the user's kernel: where every rank is (where), pdb on a rank (debugger), Horovod's
timeline of a cell (timeline) and torch.profiler's (profile)."""
