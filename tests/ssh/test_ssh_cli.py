"""The CLI's SSH edges: an unknown host refused with the fingerprint to trust (exit 2, one
line), `jobs` still listing a remote job whose host is unreachable (marked stale), and
`launch --host` with a model and --output that only the host has (neither is planned with
nor checked on this machine), and `plan --host` planning for the host's GPUs and model."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
from pathlib import Path

import pytest
from ssh_helpers import cli, fake_gpu_pythons

from veri_tui.launch import registry
from veri_tui.launch.job_datasets import BUNDLED_DATASETS
from veri_tui.launch.jobs import list_jobs
from veri_tui.plan import read_model_info
from veri_tui.plan.model_sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def test_unknown_host_refused_by_launch(ssh_env, tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "config"
    config.write_text(
        ssh_env.ssh_config.read_text().replace(str(ssh_env.known_hosts), str(tmp_path / "kh"))
    )
    monkeypatch.setenv("VERI_SSH_CONFIG", str(config))
    out = cli("launch", "--host", ssh_env.alias, "--gpu-count", "1")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: host: {ssh_env.alias} ([127.0.0.1]:")
    assert "--trust-host SHA256:" in lines[0]
    wrong = cli("launch", "--host", ssh_env.alias, "--trust-host", "SHA256:nope")
    assert wrong.returncode == 2 and "not one given with --trust-host (SHA256:nope)" in wrong.stderr
    assert "CHANGED" not in wrong.stderr and "match" not in wrong.stderr  # unknown, not changed
    assert not (tmp_path / "kh").exists()
    assert not (tmp_path / "remote-veri").exists()  # nothing was uploaded


def test_plan_host_trusts_an_unknown_host_only_when_told(
    ssh_env, tmp_path: Path, monkeypatch
) -> None:
    kh = tmp_path / "kh"
    config = tmp_path / "config"
    config.write_text(ssh_env.ssh_config.read_text().replace(str(ssh_env.known_hosts), str(kh)))
    monkeypatch.setenv("VERI_SSH_CONFIG", str(config))
    job = ["--host", ssh_env.alias, "--gpu-count", "1"]
    refused = cli("plan", *job)
    assert refused.returncode == 2 and not kh.exists()
    fingerprint = refused.stderr.split("--trust-host ")[1].split()[0].rstrip(".,;:)")
    assert fingerprint.startswith("SHA256:")
    out = cli("plan", *job, "--trust-host", fingerprint)
    assert out.returncode == 0, out.stderr
    assert "plan: dp=1 " in out.stdout
    assert kh.exists() and kh.read_text().strip()  # the trust was recorded
    assert cli("plan", *job).returncode == 0  # and holds without the flag


def test_unreachable_host_listed_stale(ssh_env) -> None:
    record = {"job_id": "20260101-000000-dead", "status": "running", "spec": {"gpu_count": 2}}
    registry.save(
        registry.RegistryEntry(
            record["job_id"], "root@127.0.0.1:1", "/nowhere", "1", "python3", record
        )
    )
    [listed] = list_jobs()
    assert listed["stale"] is True and listed["status"] == "running"
    assert listed["host"] == "root@127.0.0.1:1"
    out = cli("jobs", "--json")
    assert json.loads(out.stdout)[0]["stale"] is True


@pytest.mark.timeout(150)
def test_launch_host_uses_a_model_and_output_only_the_host_has(ssh_env, tmp_path: Path) -> None:
    # The host is this machine, but `~/` means two places: here the CLI's $HOME (a tmp folder),
    # on the host the remote user's home from the password database (sshd sets HOME from it).
    # The model is put only there; here the same output name is taken by a non-empty folder.
    remote_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    local_home = tmp_path / "local-home"
    name = f".veri-test-{secrets.token_hex(4)}"
    assert local_home / name != remote_home / name
    (local_home / name / "out").mkdir(parents=True)
    (local_home / name / "out" / "old.bin").write_bytes(b"x")
    env = dict(os.environ, HOME=str(local_home))
    job = ["--model", f"~/{name}/model", "--output", f"~/{name}/out", "--gpu-count", "1"]
    job += ["--dataset", str(BUNDLED_DATASETS["sft_text"])]
    job += ["--set", "max_steps=1", "--set", "max_seq_length=32"]
    try:
        shutil.copytree(bundled_tiny_model(), remote_home / name / "model")
        # Here, both paths are refused: the model is not on this machine, the output is taken.
        here = cli("plan", *job[:2], env=env)
        assert here.returncode == 2 and here.stderr.startswith("error: model: "), here.stderr
        here = cli("launch", *job, env=env)
        assert here.returncode == 2 and here.stderr.startswith("error: output: "), here.stderr
        out = cli("launch", "--host", ssh_env.alias, *job, "--wait", "--json", env=env)
        assert out.returncode == 0, out.stderr
        final = json.loads(out.stdout)
        assert final["status"] == "succeeded", final
        spec = final["spec"]
        assert spec["model"] == f"~/{name}/model"
        assert spec["model_path"] == str(remote_home / name / "model")
        assert spec["output_dir"] == str(remote_home / name / "out")
        # Planned on the host, from the model's headers read over SFTP there.
        count = f"{read_model_info(str(bundled_tiny_model())).parameter_count:,}"
        assert any(count in line for line in spec["plan_header"])
        assert (remote_home / name / "out" / "config.json").is_file()
        assert [p.name for p in (local_home / name / "out").iterdir()] == ["old.bin"]
    finally:
        shutil.rmtree(remote_home / name, ignore_errors=True)


@pytest.mark.timeout(120)
def test_plan_host_plans_for_the_hosts_gpus_and_model(ssh_env, tmp_path: Path) -> None:
    # The model only on the host (as above); the host's python sees two 81559 MiB boards.
    remote_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    name = f".veri-test-{secrets.token_hex(4)}"
    cuda_python, _ = fake_gpu_pythons(tmp_path)
    env = dict(os.environ, HOME=str(tmp_path / "local-home"), VERI_REMOTE_PYTHON=cuda_python)
    job = ["--model", f"~/{name}/model", "--gpu", "L4-24GB", "--gpu-count", "2"]
    count = f"{read_model_info(str(bundled_tiny_model())).parameter_count:,}"
    try:
        shutil.copytree(bundled_tiny_model(), remote_home / name / "model")
        here = cli("plan", *job, env=env)
        assert here.returncode == 2 and here.stderr.startswith("error: model: "), here.stderr
        out = cli("plan", "--host", ssh_env.alias, *job, env=env)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].startswith(f"model: ~/{name}/model: {count} parameters")
        assert lines[1].startswith("budget: ") and " on custom-85.521GB x2 " in lines[1]
        assert lines[3].startswith("plan: dp=2 zero_stage=0 ")
        assert lines[-4].startswith("throughput: not estimated (custom-85.521GB has no known")
        assert lines[-3].startswith("memory: peak 2.2 GB/GPU of 85.5 GB = states 0.0")
        assert lines[-1] == "cost: not estimated (custom-85.521GB has no throughput estimate)"
        rec = json.loads(cli("plan", "--host", ssh_env.alias, *job, "--json", env=env).stdout)
        assert rec["gpu"]["name"] == "custom-85.521GB" and rec["header_lines"] == lines[:3]
        assert rec["model"]["path"] == str(remote_home / name / "model")
        # What the host cannot do is refused as `launch --host` refuses it.
        over = cli("plan", "--host", ssh_env.alias, *job[:4], "--gpu-count", "4", env=env)
        assert over.returncode == 2 and over.stderr.startswith("error: gpu_count: 4 requested")
    finally:
        shutil.rmtree(remote_home / name, ignore_errors=True)


def test_two_unknown_hosts_are_trusted_in_one_rerun(sshd, sshd2, tmp_path: Path) -> None:
    """Both refused at once, each by its alias; the rerun the refusal prints trusts both."""
    from multinode_helpers import two_node_env

    env = two_node_env(sshd, sshd2, tmp_path)
    kh = tmp_path / "kh"
    config = Path(env["VERI_SSH_CONFIG"])
    text = config.read_text()
    for server in (sshd, sshd2):
        text = text.replace(str(server.known_hosts), str(kh))
    config.write_text(text)
    job = ["--host", sshd.alias, "--host", sshd2.alias]
    refused = cli("plan", *job, env=env)
    assert refused.returncode == 2 and not kh.exists()
    lines = refused.stderr.strip().splitlines()
    assert lines[0].startswith(f"error: host: {sshd.alias} ([127.0.0.1]:{sshd.port}) is not in")
    assert lines[1].startswith(f"error: host: {sshd2.alias} ([127.0.0.1]:{sshd2.port}) is not in")
    assert lines[2].startswith("error: trust_host: if those are the hosts you expect, rerun with")
    rerun = lines[2].split("rerun with ", 1)[1].split()
    assert rerun.count("--trust-host") == 2
    out = cli("plan", *job, *rerun, env=env)
    assert out.returncode == 0, out.stderr
    assert f"nodes: 2 x 1 GPU ({sshd.alias}, {sshd2.alias})" in out.stdout
    assert len(kh.read_text().splitlines()) == 2  # both recorded
