"""Imported on the MPI engines only: Horovod bootstrap and the cell runner (no IPython.display here)."""
