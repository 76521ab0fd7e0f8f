"""Machines reached by SSH (paramiko): the `SshMachine` (machine.py: commands, files,
processes), the `SshHost` that has one (host.py: the job's steps there), and what they are
made of: `connection.py` (one connection through ProxyJump hops, timeouts everywhere, argv-only
commands), `hosts.py` (~/.ssh/config aliases and `user@host[:port]`), `hostkeys.py`
(known_hosts: unknown and changed keys refused), `files.py` (SFTP: bounded reads, atomic
writes, package uploads), `tail.py` (the resumable log tail), `preflight.py` (the host's
probe), `remote_model.py` (the model found and counted over SFTP). Nothing here orchestrates
a job: the one launch sequence, preflight and job target (veri_tui/launch) do, over any
`Host`. Details in docs/ssh.md.
"""
