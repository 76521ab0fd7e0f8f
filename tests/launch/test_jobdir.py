"""The job folder's modules (veri_tui/jobfolder/contract/atomic.py, record.py, status.py, procs.py):
concurrent job.json updates, the atomic writer, statuses, pid files, and a lock whose holder was
killed."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from veri_tui.jobfolder.contract import atomic
from veri_tui.jobfolder.contract.atomic import (
    job_lock,
    modify_job,
    record_cancel,
    update_job,
    write_bytes_atomic,
    write_json_atomic,
)
from veri_tui.jobfolder.contract.procs import pid_alive, rank_pid_path, read_pid, write_pid
from veri_tui.jobfolder.contract.record import read_job
from veri_tui.jobfolder.contract.status import ENDED, STATUSES, has_ended, is_lost, outcome_recorded

REPO = Path(__file__).resolve().parents[2]
UPDATES = 200

# Each writer appends 0..UPDATES-1 to its own key, one locked read-modify-write per number,
# starting when the go file appears so that both run at once.
WRITER = """
import sys, time
from pathlib import Path
from veri_tui.jobfolder.contract.atomic import modify_job
job, key, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
while not go.exists():
    time.sleep(0.001)
for i in range({n}):
    modify_job(job, lambda record: record.setdefault(key, []).append(i))
"""


def new_job(tmp_path: Path, **fields: object) -> Path:
    path = tmp_path / "job.json"
    write_json_atomic(path, {"job_id": "j", "status": "running", **fields})
    return path


def test_two_processes_updating_at_once_lose_no_update(tmp_path: Path) -> None:
    path = new_job(tmp_path)
    go = tmp_path / "go"
    script = WRITER.format(n=UPDATES)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    writers = [
        subprocess.Popen([sys.executable, "-c", script, str(path), key, str(go)], env=env)
        for key in ("a", "b")
    ]
    go.touch()
    assert [w.wait(timeout=300) for w in writers] == [0, 0]
    record = read_job(path)
    assert record["a"] == list(range(UPDATES)) and record["b"] == list(range(UPDATES))
    assert record["status"] == "running"  # the fields neither writer touched are kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "job.json", "job.json.lock"]


def test_atomic_writer_leaves_no_tmp_and_readers_never_see_a_part(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    write_json_atomic(path, {"n": -1})
    done = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        while not done.is_set():
            seen.append(json.loads(path.read_text())["n"])  # a torn file would not parse

    thread = threading.Thread(target=reader)
    thread.start()
    for n in range(300):
        write_json_atomic(path, {"n": n, "pad": "x" * 50_000})
    done.set()
    thread.join()
    assert seen and seen == sorted(seen)  # each read is some whole version, in order
    assert json.loads(path.read_text())["n"] == 299
    assert [p.name for p in tmp_path.iterdir()] == ["data.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "job.json"
    path.write_text('{"old": true}')

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        write_bytes_atomic(path, b'{"new": true}')
    monkeypatch.undo()
    assert path.read_text() == '{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["job.json"]


def test_exact_mode_and_default_umask(tmp_path: Path) -> None:
    write_bytes_atomic(tmp_path / "private", b"k", mode=0o600)
    assert (tmp_path / "private").stat().st_mode & 0o777 == 0o600
    old = os.umask(0o022)
    try:
        write_bytes_atomic(tmp_path / "plain", b"k")
    finally:
        os.umask(old)
    assert (tmp_path / "plain").stat().st_mode & 0o777 == 0o644


def test_statuses_and_has_ended() -> None:
    assert set(ENDED) < set(STATUSES)
    assert [s for s in STATUSES if has_ended(s)] == ["succeeded", "failed", "cancelled"]
    assert not has_ended(None) and not has_ended({}) and not has_ended("lost")
    assert has_ended({"status": "failed"}) and not has_ended({"status": "running"})
    lost = {"status": "failed", "lost": True}
    assert has_ended(lost) and is_lost(lost) and not outcome_recorded(lost)
    assert outcome_recorded({"status": "cancelled"}) and not is_lost({"status": "cancelled"})


def test_update_and_cancel_keep_a_recorded_outcome(tmp_path: Path) -> None:
    (tmp_path / "ended").mkdir(), (tmp_path / "running").mkdir()
    path = new_job(tmp_path / "ended", error=None)
    assert update_job(path, exit_code=3)["exit_code"] == 3
    assert modify_job(path, lambda r: {"job_id": "j", "status": "succeeded"}) == read_job(path)
    assert record_cancel(path)["status"] == "succeeded"  # an outcome is never rewritten
    cancelled = record_cancel(new_job(tmp_path / "running"))
    assert cancelled["status"] == "cancelled" and cancelled["ended_at"]


def test_supervisor_started_after_a_cancel_leaves_it_cancelled(tmp_path: Path) -> None:
    path = new_job(tmp_path, status="cancelled", spec={"gpu_count": 1})
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "veri_tui.jobfolder.supervise", "--job", str(path)]
    assert subprocess.run(cmd, env=env, timeout=120, check=False).returncode == 0
    assert read_job(path)["status"] == "cancelled"
    assert not (tmp_path / "torchrun.log").exists()  # nothing was started


def test_pid_files(tmp_path: Path) -> None:
    pid_file = rank_pid_path(tmp_path, 3)
    assert pid_file == tmp_path / "pids" / "rank-3"
    pid_file.parent.mkdir()
    assert read_pid(pid_file) is None
    write_pid(pid_file)
    assert read_pid(pid_file) == os.getpid() and pid_alive(os.getpid())
    write_pid(pid_file, 12345)
    assert pid_file.read_text() == "12345\n"
    pid_file.write_text("not a pid")
    assert read_pid(pid_file) is None
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    while not Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z":
        time.sleep(0.01)  # until it has exited, not yet reaped
    assert not pid_alive(zombie.pid)
    zombie.wait()
    assert not pid_alive(zombie.pid)


def test_the_lock_is_free_again_when_its_holder_is_killed(tmp_path: Path) -> None:
    path = new_job(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys, time\nfrom veri_tui.jobfolder.contract.atomic import job_lock\n"
            "with job_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(600)\n",
            str(path),
        ],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        fd = os.open(str(path) + ".lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # really held by the other process
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the kernel released it
        finally:
            os.close(fd)
    finally:
        holder.kill()
        holder.wait()
    with job_lock(path):
        pass
    assert update_job(path, after="kill")["after"] == "kill"


def test_supervisor_imports_only_the_standard_library() -> None:
    code = (
        "import sys, json\n"
        "before = set(sys.modules)\n"
        "import veri_tui.jobfolder.supervise.supervisor\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(json.dumps(sorted(new - set(sys.stdlib_module_names) - {'veri_tui'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
