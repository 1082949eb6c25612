"""slurm-ft-report: turn a state dir into an answer to "where did the allocation go".

``load`` reads the records (tolerating damaged ones), ``analysis`` is the pure accounting,
``text``, ``jsonout`` and ``svg`` render it. No torch anywhere, and rich only when a
terminal report is printed.
"""
