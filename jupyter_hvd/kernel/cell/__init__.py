"""The running `%%hvd` cell, in the user's kernel: dispatched to every rank and waited for, wound down when it fails
(run), and its figures for the sidebar and the view (figures, straggler)."""
