"""The bundled trainer's own code on fake CUDA devices: N ranks' shapes in one process, no GPU.

docs/trace.md: what runs (device.py, runtime.py, kernels.py, session.py), what is counted
(tracker.py), the traced job (trace.py) and its command line (__main__.py).
"""
