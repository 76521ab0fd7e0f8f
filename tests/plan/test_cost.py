"""The cost of a whole job: `veri-tui plan` prints the cost line and `--json` carries `cost`
with steps = epochs x floor(rows / gbs) (or max_steps), GPU-hours = wall x gpus / 3600,
price = GPU-hours x price; the price from the knob, the prices file, or the list."""

from __future__ import annotations

import itertools
import json
import re
import statistics
from pathlib import Path

import pytest

from veri_tui.cli import main
from veri_tui.plan.cost import expected_max, gpu_hours_text
from veri_tui.plan.prices import LIST_PRICES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "assets" / "examples"
TINY = ROOT / "assets" / "tiny-model"
COST_RE = re.compile(
    r"^cost: [\d.,]+ (h|min|s) on \d+ x \S+ = ([\d.,]+|<0\.001) GPU-hours"
    r"( \(\d+% in the optimizer step\))?, "
    r"(~\$[\d,]+\.\d\d|<\$0\.01) at \$[\d,]+\.\d\d/GPU-hour( \(.+\))?$"
)


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str, rc: int = 0) -> dict:
    assert main(["plan", *argv, "--json"]) == rc
    return json.loads(capsys.readouterr().out)


def sft_rows(path: Path, n: int) -> Path:
    """n rows cycled from the bundled sft dataset."""
    rows = (ROOT / "assets" / "data" / "sft.jsonl").read_text().splitlines()
    path.write_text("\n".join(itertools.islice(itertools.cycle(rows), n)) + "\n")
    return path


@pytest.mark.parametrize("name", ["sft-tiny.toml", "dpo-lora-tiny.toml"])
def test_bundled_examples_print_the_cost_line(name: str, capsys) -> None:
    assert main(["plan", str(EXAMPLES / name)]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("cost:")]
    assert len(lines) == 1 and COST_RE.match(lines[0]), lines
    assert "full-length samples assumed" not in lines[0]  # counted with the tokenizer


def test_hub_examples_without_a_tokenizer_assume_full_length_and_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_dirs: dict[str, Path], capsys
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for repo, key in (
        ("Qwen/Qwen3-0.6B", "qwen3-0.6b"),
        ("meta-llama/Llama-3.1-70B", "llama-3.1-70b"),
    ):
        repo_dir = tmp_path / ("models--" + repo.replace("/", "--"))
        (repo_dir / "snapshots").mkdir(parents=True)
        (repo_dir / "snapshots" / "r1").symlink_to(model_dirs[key])
        (repo_dir / "refs").mkdir()
        (repo_dir / "refs" / "main").write_text("r1")
    for name, gpus in (("qwen3-0.6b-l4x4.toml", 4), ("llama-70b-h100x8.toml", 8)):
        # The cost is still estimated (full-length rows), and `plan` exits 2: the launch
        # would refuse a model folder without a tokenizer (issue 35).
        assert main(["plan", str(EXAMPLES / name)]) == 2
        out, err = capsys.readouterr()
        line = next(x for x in out.splitlines() if x.startswith("cost:"))
        assert COST_RE.match(line) and f" on {gpus} x " in line
        assert "full-length samples assumed: no tokenizer.json in" in line
        assert err.startswith("error: model: ") and "has no tokenizer files" in err, err
        cost = plan_json(capsys, str(EXAMPLES / name), rc=2)["cost"]
        # 64 rows, gbs 64, one epoch: one step at max_seq_length.
        assert cost["dataset_tokens"] is None and cost["steps"] == 1
        assert cost["sample_length"] in (2048, 4096)


@pytest.mark.parametrize("epochs, gbs, mbs", [(1, 8, 1), (3, 8, 2), (2, 12, 3)])
def test_steps_hours_and_price_follow_the_formulas(
    tmp_path: Path, capsys, epochs: int, gbs: int, mbs: int
) -> None:
    data = sft_rows(tmp_path / "d.jsonl", 70)  # 70 rows: the last partial batch is dropped
    cost = plan_json(
        capsys, "--model", str(TINY), "--dataset", str(data), "--gpu-count", "2",
        "--set", f"num_epochs={epochs}", "--set", f"global_batch_size={gbs}",
        "--set", f"micro_batch_size={mbs}",
    )["cost"]  # fmt: skip
    assert cost["known"] and cost["dataset_rows"] == 70
    assert cost["steps"] == epochs * (70 // gbs)
    assert cost["wall_time_s"] == pytest.approx(cost["steps"] * cost["step_time_s"])
    assert cost["gpu_hours"] == pytest.approx(cost["wall_time_s"] * 2 / 3600)
    assert cost["price_per_gpu_hour"] == LIST_PRICES["L4-24GB"].usd
    assert cost["price"] == pytest.approx(cost["gpu_hours"] * cost["price_per_gpu_hour"])
    assert cost["source"].startswith("list price (AWS g6.12xlarge")
    assert cost["dataset_tokens"] > 70  # every row is several tokens


def test_set_price_per_gpu_hour(capsys) -> None:
    cost = plan_json(capsys, str(EXAMPLES / "sft-tiny.toml"), "--set", "price_per_gpu_hour=2.5")[
        "cost"
    ]
    assert cost["price_per_gpu_hour"] == 2.5 and cost["source"] == "price_per_gpu_hour"
    assert cost["price"] == pytest.approx(cost["gpu_hours"] * 2.5)
    assert cost["steps"] == 5  # max_steps = 5 in the example overrides the epochs


@pytest.mark.parametrize("value", ["0", "-1", "nan", "cheap"])
def test_bad_price_is_one_error_line(value: str, capsys) -> None:
    code = main(["plan", "--set", f"price_per_gpu_hour={value}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: price_per_gpu_hour: ")


def test_prices_file_overrides_the_list(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    (tmp_path / "prices.toml").write_text('[prices]\n"L4-24GB" = 0.5\n')
    cost = plan_json(capsys, str(EXAMPLES / "sft-tiny.toml"))["cost"]
    assert cost["price_per_gpu_hour"] == 0.5
    assert cost["source"] == str(tmp_path / "prices.toml")
    knob = plan_json(capsys, str(EXAMPLES / "sft-tiny.toml"), "--set", "price_per_gpu_hour=3")
    assert knob["cost"]["price_per_gpu_hour"] == 3  # the knob wins over the file


@pytest.mark.parametrize(
    "text, problem",
    [("[prices\n", "not valid TOML"), ('[prices]\n"L4-24GB" = "x"\n', "L4-24GB: a price"),
     ('"L4-24GB" = 1\n', "no [prices] table")],
)  # fmt: skip
def test_bad_prices_file_is_one_warning(
    tmp_path: Path, monkeypatch, capsys, text: str, problem: str
) -> None:
    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    (tmp_path / "prices.toml").write_text(text)
    assert main(["plan", str(EXAMPLES / "sft-tiny.toml")]) == 0
    out, err = capsys.readouterr()
    warned = [x for x in out.splitlines() if "prices.toml" in x]
    assert len(warned) == 1 and warned[0].startswith(f"warning: {tmp_path / 'prices.toml'}: ")
    assert problem in warned[0] and "Traceback" not in out + err
    cost = plan_json(capsys, str(EXAMPLES / "sft-tiny.toml"))["cost"]
    assert cost["price_per_gpu_hour"] == LIST_PRICES["L4-24GB"].usd


def test_unknown_cost_says_why(tmp_path: Path, capsys) -> None:
    assert plan_json(capsys)["cost"]["reason"] == "no dataset given"
    small = sft_rows(tmp_path / "small.jsonl", 5)
    # The plan is shown without a cost, and `plan` exits 2 as the launch would refuse it.
    argv = ("--dataset", str(small), "--set", "global_batch_size=8")
    cost = plan_json(capsys, *argv, rc=2)["cost"]
    assert (
        not cost["known"]
        and "global_batch_size 8 is more than the dataset's 5 rows" in (cost["reason"])
    )
    assert cost["steps"] is None and cost["price"] is None
    err = capsys.readouterr().err
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: global_batch_size: 8 "), err
    # A dataset launch would refuse: the plan is still printed, and `plan` exits 2 with one
    # error line naming the file and line (issue 27).
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\nnot json\n')
    cost = plan_json(capsys, "--dataset", str(tmp_path / "bad.jsonl"), rc=2)["cost"]
    assert cost["reason"].startswith(f"{tmp_path / 'bad.jsonl'} line 2: not valid JSON")
    assert main(["plan", "--dataset", str(tmp_path / "bad.jsonl")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: dataset: {cost['reason']}"]
    cost = plan_json(capsys, "--dataset", str(tmp_path / "none.jsonl"), rc=2)["cost"]
    assert cost["reason"].startswith(f"{tmp_path / 'none.jsonl'}: no such file or folder")


def test_padded_length_is_the_expected_longest_of_a_micro_batch(tmp_path: Path, capsys) -> None:
    data = sft_rows(tmp_path / "d.jsonl", 64)
    one = plan_json(capsys, "--dataset", str(data), "--set", "micro_batch_size=1")["cost"]
    assert one["sample_length"] == round(one["dataset_tokens"] / one["dataset_rows"])
    four = plan_json(capsys, "--dataset", str(data), "--set", "micro_batch_size=4")["cost"]
    assert four["sample_length"] >= one["sample_length"]
    cut = plan_json(capsys, "--dataset", str(data), "--set", "max_seq_length=8")["cost"]
    assert cut["sample_length"] == 8 and cut["dataset_tokens"] == 8 * 64


def test_expected_max_matches_enumeration() -> None:
    hist = {3: 2, 5: 1, 9: 3, 12: 1}
    values = [v for v, c in hist.items() for _ in range(c)]
    for k in range(1, len(values) + 1):
        brute = statistics.mean(max(c) for c in itertools.combinations(values, k))
        assert expected_max(hist, k) == pytest.approx(brute)
    assert expected_max(hist, 100) == 12  # more than the rows: the longest


def test_job_record_carries_the_predicted_cost(tmp_path: Path, monkeypatch, capsys) -> None:
    """make_record writes the plan's GPU-hours into job.json `predicted`; `veri-tui jobs JOB`
    prints them against (ended_at - started_at) x gpu_count and the credited GPU-seconds."""
    from veri_tui.launch.spec import make_record
    from veri_tui.plan import load_job_config, plan_job

    job = load_job_config(EXAMPLES / "sft-tiny.toml")
    plan = plan_job(job)
    rec = make_record(job, plan, "20261201-000000-abcd", model_path=str(TINY),
                      dataset=job.dataset, output_dir=str(tmp_path / "out"))  # fmt: skip
    assert rec["predicted"]["gpu_hours"] == plan.cost["gpu_hours"] > 0
    assert rec["predicted"]["price"] == plan.cost["price"]
    home = tmp_path / "home"
    monkeypatch.setenv("VERI_HOME", str(home))
    folder = home / "jobs" / rec["job_id"]
    folder.mkdir(parents=True)
    rec.update(status="succeeded", started_at="2026-12-01T00:00:00+00:00",
               ended_at="2026-12-01T00:01:30+00:00", exit_code=0, credited_gpu_s=36.0)  # fmt: skip
    (folder / "job.json").write_text(json.dumps(rec))
    (folder / "log.txt").write_text("")
    assert main(["jobs", rec["job_id"]]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith("gpu-hours: "))
    predicted = plan.cost["gpu_hours"]
    actual = 90 * 2 / 3600  # 90 s on 2 GPUs
    assert line.startswith(f"gpu-hours: predicted {gpu_hours_text(predicted)} (")
    assert f"actual {gpu_hours_text(actual)} = (ended_at - started_at) x gpu_count" in line
    assert f"({actual / predicted:,.3g}x the prediction)" in line
    assert "credited: 0.01 GPU-hours (36.0 GPU-s lost to platform failures" in out[-1]


def test_actual_gpu_hours_sum_the_attempts() -> None:
    from veri_tui.commands.jobs import actual_gpu_s, gpu_hours_lines

    rec = {"status": "succeeded", "spec": {"gpu_count": 4},
           "attempts": [{"wall_s": 100.0, "gpu_count": 4}, {"wall_s": 50.0}]}  # fmt: skip
    assert actual_gpu_s(rec) == 600.0
    assert actual_gpu_s({"status": "running", "spec": {"gpu_count": 2}}) is None
    (line,) = gpu_hours_lines({"status": "running", "predicted": {"gpu_hours": None}})
    assert line == "gpu-hours: predicted - (no cost estimate), actual - (the job has not ended)"
