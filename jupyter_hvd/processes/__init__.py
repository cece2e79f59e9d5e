"""Programs a pool runs as processes of their own, beside the kernel: the ipyparallel controller (controller) and the
reaper that ends a pool's processes when its kernel dies (reaper)."""
