"""The canary's maths: its gate on the measured steps, the extrapolated time and cost
(`canary.py`), its terms set beside the plan's (`canaryterms.py`: memory, the optimizer's
time), and its table of measured against planned (`canarytable.py`), docs/canary.md.
"""
