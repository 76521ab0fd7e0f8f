"""The canary's maths: its gate on the measured steps, the extrapolated time and cost
(`canary.py`), and its table of measured against planned (`canarytable.py`), docs/canary.md.
"""
