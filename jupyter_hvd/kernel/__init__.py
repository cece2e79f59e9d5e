"""Runs in the user's IPython kernel: magics, the engine pool, the cell runner."""
