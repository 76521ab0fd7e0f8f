"""Support code shared by the test folders and benchmarks/ (not part of the veri_tui package).

Imported as `support.<module>`: tests/conftest.py puts tests/ on sys.path, and a benchmark
inserts it itself.
"""
