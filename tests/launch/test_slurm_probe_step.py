"""The Slurm batch job's probe step without a cluster: which jobs' scripts have it and in
which mode (veri_tui/launch/slurm/script.py, the slurm backend's record_probe_mode), `--exclude`'s
check, `jobs JOB`'s probe lines, and the step refusing to run outside an allocation. The
step on real nodes: tests/slurm/test_slurm_job_probe.py."""

from __future__ import annotations

import pytest

from veri_tui.commands.jobs import probe_lines
from veri_tui.errors import VeriError
from veri_tui.jobfolder.probe import slurmprobe
from veri_tui.launch.backends import named
from veri_tui.launch.probe.fleet import ProbeChoice
from veri_tui.launch.slurm.options import slurm_options
from veri_tui.launch.slurm.script import batch_script

ARGV = ["env", "PYTHONPATH=/p", "/py", "-m", "veri_tui.jobfolder.supervise", "--job", "/j/job.json"]
STEP = "env PYTHONPATH=/p /py -m veri_tui.jobfolder.probe.slurmprobe --job /j/job.json || exit $?"


def _script(nodes: int, gpus: int, choice: ProbeChoice, env: str | None = None,
            monkeypatch: pytest.MonkeyPatch | None = None) -> str:  # fmt: skip
    spec = {"slurm": {"partition": "p", "nodes": nodes, "gpus_per_node": gpus}, "gpu_count": 2}
    if monkeypatch is not None and env is not None:
        monkeypatch.setenv("VERI_PROBE", env)
    named("slurm").record_probe_mode(spec, choice)  # type: ignore[arg-type]
    return batch_script("j1", "/j", spec, ARGV)


def test_several_nodes_or_gpus_probe_first_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VERI_PROBE", raising=False)
    two_nodes = _script(2, 0, ProbeChoice()).splitlines()
    assert two_nodes[-4:] == ["trap 'veri_usr1=1' USR1", STEP, "trap - USR1",
                              "exec " + " ".join(ARGV)]  # fmt: skip
    assert STEP in _script(1, 2, ProbeChoice())  # 2 GPUs of one node
    assert STEP in _script(2, 0, ProbeChoice(allow_slow=True))  # the step records, goes on
    for skipped in (_script(1, 0, ProbeChoice()), _script(1, 1, ProbeChoice()),
                    _script(2, 1, ProbeChoice(run=False)),
                    _script(2, 1, ProbeChoice(), "0", monkeypatch)):  # fmt: skip
        assert "slurmprobe" not in skipped and "USR1\n" not in skipped.split("#SBATCH")[-1]


def test_the_exclude_option_is_checked_and_written() -> None:
    options = slurm_options({"login": "l", "exclude": "n[1-3],gpu7"}, {})
    assert options is not None and options.exclude == "n[1-3],gpu7"
    spec = {"slurm": {**options.to_dict(), "partition": "p", "probe": "off"}}
    assert "#SBATCH --exclude=n[1-3],gpu7\n" in batch_script("j", "/j", spec, ARGV)
    with pytest.raises(VeriError) as err:
        slurm_options(None, {"login": "l", "exclude": "n1; rm"})
    assert str(err.value).startswith("slurm.exclude: 'n1; rm': give a name without spaces")


def test_jobs_shows_the_probe_and_the_step_needs_an_allocation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = {
        "probe": {
            "measured_at": "T",
            "where": "the Slurm allocation, before training",
            "lines": ["network: 1.00 Gb/s ..."],
            "refused": ["node 1 (n1) is slow"],
        }
    }
    assert probe_lines(rec) == [  # type: ignore[arg-type]
        "probe: measured T (the Slurm allocation, before training):",
        "  network: 1.00 Gb/s ...", "  refused: node 1 (n1) is slow"]  # fmt: skip
    assert probe_lines({}) == []
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert slurmprobe.main(["--job", "/nowhere/job.json"]) == 2
    assert capsys.readouterr().err == "error: slurmprobe: runs inside the job's Slurm allocation\n"
