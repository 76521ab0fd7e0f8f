"""The preflight's data check: every row encoded with the model's tokenizer where the job
will run, and the global batch against the rows the trainer will have, before anything is
created, uploaded or submitted.

Refused, one line each: a model folder without tokenizer files (`model`: read from its file
list, nothing loaded), a tokenizer that gives no ids or has no EOS (`model`), rows the prompt
leaves nothing to train on within max_seq_length (`dataset`, the first few named by line), a
global batch larger than the training rows (`global_batch_size`). The check itself is the
trainer's (veri_tui/trainer/datacheck.py, the ranks' encode rules): on this machine `python
-m veri_tui.trainer.datacheck`; on an SSH host or a Slurm login node `python -c BOOT`, with
that module and the stdlib ones it imports sent on stdin beside the rows read here, so
nothing is written there. A job over SSH on the bundled model (uploaded with the job) is
checked here. One answer per process and inputs (`_MEMO`): a preflight and its launch pay
once. A check on this machine (about 2 CPU-seconds, most of them transformers' imports) is
also kept by what it read, `$VERI_DATACHECK_CACHE` (default `$VERI_HOME/cache/datacheck`)
`/<sha256>.json`: the tokenizer's files, the rows' bytes, method, length, the check's code
and the transformers and tokenizers versions; the same job launched again pays nothing.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veri_tui.errors import Refusal
from veri_tui.jobfolder.data.encode import tokenizer_files
from veri_tui.launch.host import Host, HostFacts, Row
from veri_tui.launch.job_datasets import JobData, local_data

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord

#: What the check imports, sent to a host that has no veri_tui (veri_tui/trainer/datacheck.py).
SHIPPED = (
    "veri_tui", "veri_tui.jobfolder", "veri_tui.jobfolder.contract",
    "veri_tui.jobfolder.contract.status", "veri_tui.jobfolder.contract.errors",
    "veri_tui.jobfolder.data", "veri_tui.jobfolder.data.rows", "veri_tui.jobfolder.data.encode",
    "veri_tui.trainer", "veri_tui.trainer.datacheck",
)  # fmt: skip
PACKAGES = ("veri_tui", "veri_tui.jobfolder", "veri_tui.jobfolder.contract",
            "veri_tui.jobfolder.data", "veri_tui.trainer")  # fmt: skip
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
MODULE = "veri_tui.trainer.datacheck"  # run with -m on this machine
TIMEOUT_S = 1800.0  # every row encoded in one process: a large dataset takes minutes

# The shipped modules imported from memory, then the check run on the payload.
BOOT = r"""
import importlib.abc, importlib.machinery, json, sys, zlib
data = json.loads(zlib.decompress(sys.stdin.buffer.read()))
code = data.pop("modules")
class Shipped(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in code:
            return importlib.machinery.ModuleSpec(name, self, is_package=code[name][0])
        if name.split(".")[0] == "veri_tui":  # never another copy's: SHIPPED must be whole
            raise ImportError(name + " is not sent with the check (datacheck.SHIPPED)")
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(compile(code[module.__name__][1], "<veri " + module.__name__ + ">", "exec"),
             module.__dict__)
sys.meta_path.insert(0, Shipped())
from veri_tui.trainer.datacheck import run
print(json.dumps(run(data)))
"""

NO_TOKENIZER = (
    "{model} has no tokenizer files (tokenizer.json, tokenizer.model, vocab.json, ...; a "
    "checkpoint saved with model.save_pretrained alone): every row would encode to nothing; "
    "save the base model's tokenizer beside it: "
    "AutoTokenizer.from_pretrained(BASE_MODEL).save_pretrained('{model}')"
)

_MEMO: dict[tuple[Any, ...], dict[str, Any]] = {}


def _module_code(name: str) -> tuple[bool, str]:
    root = Path(__file__).resolve().parents[1]  # the veri_tui package folder
    parts = name.split(".")[1:]
    path = root.joinpath(*parts, "__init__.py") if name in PACKAGES else root.joinpath(*parts)
    if name not in PACKAGES:
        path = path.with_suffix(".py")
    return name in PACKAGES, path.read_text(encoding="utf-8")


def _payload(model: str, job: JobConfig, data: JobData, inline: bool) -> dict[str, Any]:
    from veri_tui.jobfolder.data.dataload import mixed_rows

    hp = job.hyperparameters
    dpo = job.method == "dpo"
    out: dict[str, Any] = {"model": model, "method": job.method, "limit": 5,
                           "max_length": hp.max_length if dpo else hp.max_seq_length}  # fmt: skip
    for name, sources in (("train", data.train), ("eval", data.eval)):
        if not sources:
            continue
        if inline:  # read here: the host has no copy of them yet
            rows = mixed_rows(list(sources), method=job.method)
            out[name] = {"rows": [[w, r] for w, r in rows]}
        else:
            out[name] = {"sources": [s.to_dict() for s in sources]}
    if inline:
        out["modules"] = {n: _module_code(n) for n in SHIPPED}
    return out


def _ask(host: Host, payload: dict[str, Any], inline: bool) -> dict[str, Any]:
    machine = host.machine
    argv = [machine.python, "-c", BOOT] if inline else [machine.python, "-m", MODULE]
    res = machine.run(argv, timeout=TIMEOUT_S, stdin=zlib.compress(json.dumps(payload).encode()))
    try:
        answer: dict[str, Any] = json.loads(res.stdout.decode("utf-8").strip().splitlines()[-1])
        return answer
    except (ValueError, IndexError):
        line = res.error_line()
        if "No module named 'transformers'" in line:
            line = f"transformers is not installed for {machine.python} (pip install transformers)"
        return {"problems": [["model", f"the tokenizer check on {host.where} failed: {line}"]]}


def training_rows(job: JobConfig, rows: int, lengths: list[int]) -> int:
    """The rows a global batch is cut from, as the trainer makes them: less eval_fraction's
    held-out rows (veri_tui/trainer/evaluate.py), packed when the job packs."""
    from veri_tui.jobfolder.data.dataload import eval_split
    from veri_tui.jobfolder.data.packing import pack

    hp = job.hyperparameters
    held = set() if job.eval_dataset else set(eval_split(rows, hp.eval_fraction, hp.seed))
    if hp.packing and job.method == "sft_text" and len(lengths) == rows:
        kept = [n for i, n in enumerate(lengths) if i not in held]
        return len(pack(kept, hp.max_seq_length))
    return rows - len(held)


def batch_problem(job: JobConfig, plan: PlanRecord, rows: int) -> Refusal | None:
    """A global batch the training rows cannot fill once (the trainer's ConfigError)."""
    rp = plan.resolved_parallelism
    gbs = int(rp["global_batch_size"])
    if gbs <= rows:
        return None
    what = "packed rows" if job.hyperparameters.packing else "rows"
    dp = int(rp["data_parallel_size"])
    gpus = f"{dp} data-parallel rank" + "s" * (dp != 1)
    return Refusal("global_batch_size", (
        f"{gbs} (micro_batch_size {rp['micro_batch_size']} x gradient_accumulation_steps "
        f"{rp['gradient_accumulation_steps']} x {gpus}) is more than "
        f"the dataset's {rows} {what}; lower micro_batch_size or gradient_accumulation_steps, "
        f"or set global_batch_size to at most {rows}"
    ))  # fmt: skip


def check_data(host: Host, facts: HostFacts | None, job: JobConfig, plan: PlanRecord
               ) -> tuple[list[Row], list[Refusal]]:  # fmt: skip
    """The rows and refusals of the job's data on ``host`` (its model as ``facts`` found it
    there; None or no model path: the plan's, on this machine)."""
    from veri_tui.launch.local_host import LocalHost

    model = facts.model_path if facts is not None and facts.model_path else None
    if model is None:
        model = plan.to_dict()["model"].get("path")
        if model is None:
            return [], []  # only its Hub metadata here: refused by the job's paths
        if not host.machine.local:
            host = LocalHost()  # the bundled model, uploaded with the job: checked here
    if not tokenizer_files(host.machine.listdir(model)):
        return [], [Refusal("model", NO_TOKENIZER.format(model=model))]
    data = local_data(job)
    inline = not host.machine.local
    hp = job.hyperparameters
    key = (host.machine.name, model, _stamp(host, model), str(data), _stats(data), job.method,
           hp.max_length, hp.max_seq_length)  # fmt: skip
    if key not in _MEMO:
        stored = None if inline else _stored(model, job, data)
        answer = _read(stored) if stored is not None else None
        if answer is None:
            answer = _ask(host, _payload(model, job, data, inline), inline)
            if stored is not None and answer.get("checked"):
                _write(stored, answer)
        _MEMO[key] = answer
    answer = _MEMO[key]
    problems = [Refusal(k, m) for k, m in answer.get("problems", [])]
    rows: list[Row] = []
    train = answer.get("train")
    if answer.get("tokenizer"):
        rows.append(("tokenizer", True, f"{answer['tokenizer']} from {model}"))
    if train is not None and not problems:
        length = hp.max_length if job.method == "dpo" else hp.max_seq_length
        rows.append(("rows", True, f"{train['rows']:,} rows, each with tokens to train on "
                                   f"within {length} tokens"))  # fmt: skip
        found = batch_problem(job, plan, training_rows(job, train["rows"], train["lengths"]))
        problems += [found] if found is not None else []
    return rows, problems


def cache_dir() -> Path:
    """Where checks made on this machine are kept (see the module docstring)."""
    from veri_tui.jobfolder.contract.layout import veri_home

    given = os.environ.get("VERI_DATACHECK_CACHE")
    return Path(given) if given else veri_home() / "cache" / "datacheck"


def _stored(model: str, job: JobConfig, data: JobData) -> Path | None:
    """The cache file of this check: a sha256 over everything its answer depends on."""
    import hashlib
    import importlib.metadata

    from veri_tui.jobfolder.data.source import fingerprint

    hp = job.hyperparameters
    digest = hashlib.sha256(b"veri-datacheck-v1\0")
    try:
        versions = [importlib.metadata.version(n) for n in ("transformers", "tokenizers")]
    except importlib.metadata.PackageNotFoundError:
        return None  # no check can run here: nothing to keep
    parts = [
        *versions,
        job.method,
        str(hp.max_length if job.method == "dpo" else hp.max_seq_length),
        fingerprint(list(data.train)),
        fingerprint(list(data.eval)),
    ]
    digest.update("\0".join(parts).encode())
    for name in SHIPPED:
        digest.update(_module_code(name)[1].encode())
    for f in sorted(Path(model).iterdir()):  # the tokenizer's files and config, not weights
        if f.is_file() and not f.name.endswith(WEIGHTS) and f.stat().st_size < 1 << 26:
            digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return cache_dir() / f"{digest.hexdigest()}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        answer: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return answer
    except (OSError, ValueError):
        return None  # none yet, or unreadable: checked again


def _write(path: Path, answer: dict[str, Any]) -> None:
    from veri_tui.jobfolder.contract.atomic import write_json_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, answer)
    except OSError:
        pass  # a read-only home only costs the next launch the check


def _stamp(host: Host, model: str) -> tuple[Any, ...]:
    """The model's tokenizer files (names; here also their sizes and times)."""
    names = tuple(host.machine.listdir(model))
    if not host.machine.local:
        return names
    return tuple((n, (st := (Path(model) / n).stat()).st_size, st.st_mtime_ns) for n in names)


def _stats(data: JobData) -> tuple[Any, ...]:
    from veri_tui.jobfolder.data.source import stat_key

    return (stat_key(list(data.train)), stat_key(list(data.eval)))
