"""Horovod on a rank: it rests whenever no rank uses it (rest), a script's habits made safe on a pool that lives on
(guards), and what a cell's hvd.init() can start again with (init_settings)."""
