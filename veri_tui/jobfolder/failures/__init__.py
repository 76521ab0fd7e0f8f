"""Why a job failed: the failure rules (`failure_rules.py`), their sources in a job's files
(`failure_sources.py`), the report (`failures.py`), what a hung or crashed rank left
(`forensics.py`, `hangreport.py`, `flightrec.py`, `stackdump.py`, `ncclabort.py`) and the
host's memory (`hostmem.py`: the OOM killer named).
"""
