"""I/O without UI: job specs, local and SSH launch, job records, log tailing, failures.

Never imports textual; the trainer side (torch) runs in another process.
"""
