"""What a rank says about itself when something is wrong or slow: where it is (where), pdb on it (debugger), Horovod's
timeline (timeline) and torch.profiler (profile)."""
