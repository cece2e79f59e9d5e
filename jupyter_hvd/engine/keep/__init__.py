"""Kept names on a rank: each rank's part of a snapshot taken (snapshot), how a kept object becomes bytes (encoding,
content, shards) and where they live on disk (files), and a snapshot brought back (restore)."""
