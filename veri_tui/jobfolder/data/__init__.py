"""The dataset readers: sources (`source.py`), rows by the same rules the planner counts
and the ranks tokenize (`rows.py`, `columns.py`, `colhint.py`, `encode.py`), loading and
counting (`dataload.py`), packing (`packing.py`). Stdlib only: the planner imports them.
"""
