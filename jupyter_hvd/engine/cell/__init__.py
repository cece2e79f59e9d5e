"""The running cell on a rank: it runs (runner), and what it reports as it runs: report() records, tqdm bars
(progress) and the time each step computes and waits (pace)."""
