"""The dataset is prepared once per job folder: tokenized over the ranks, cached, reused.

On each node (each has its own job folder; a Slurm job's nodes share one, and all its ranks
count as one node's here) the ranks tokenize disjoint rows into the token
cache (veri_tui/trainer/tokencache.py): local rank k of L checks and encodes rows k, k+L, k+2L, ...,
streaming its part to `<job_dir>/tokens.tmp/`; local rank 0 then writes meta.json and the
manifest and renames the folder to `tokens/` (the checkpoint's commit pattern: written aside,
fsynced, renamed, folder fsynced). Split rather than once on rank 0: the others would idle
meanwhile, and a long tokenization alone could outlast the process group's timeout.

A later attempt in the folder (a resume, a supervisor retry) finds `tokens/`; local rank 0
checks it (the key: the dataset's size and sha256, method, max_length, the tokenizer's files
and the trainer's tokenization code; then the manifest's sizes and hashes, then the layout)
and every rank of the node reuses it or, whatever is wrong, it is built again. Rank 0's log
says which. A bad row raises DataError on the rank that finds it; the ranks agree on the
first bad line in the file, and every rank raises that one, as when each checked all rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

from veri_tui.jobfolder.contract import manifest
from veri_tui.jobfolder.contract.atomic import fsync_dir, write_json_atomic
from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.contract.stopping import SHARED_ENV
from veri_tui.jobfolder.data.dataload import mixed_rows
from veri_tui.jobfolder.data.source import Source, as_sources, fingerprint
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.data import encode_row
from veri_tui.trainer.report import RankContext, RankLog
from veri_tui.trainer.tokencache import FORMAT, META, CacheError, PartWriter, TokenCache

CACHE, BUILDING = "tokens", "tokens.tmp"
EVAL_CACHE = "eval-tokens"  # an eval_dataset's own cache, beside the training one
NO_CACHE = "none yet"  # stale_reason's answer for a folder that never had a cache
#: Files AutoTokenizer may read from a model folder; those present name the tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model",
    "chat_template.jinja", "chat_template.json", "config.json",
)  # fmt: skip
#: The code that turns rows into tokens: a change to it makes every old cache stale.
#: Beside this module: the trainer's; in the job folder's package (uploaded with it): its own.
ENCODERS = ("data.py", "tokencache.py")
ROW_RULES = ("rows.py", "columns.py", "dataload.py", "encode.py")
Sources = list[Source] | Path | str


def cache_key(
    dataset: Sources, method: str, max_len: int, model_dir: Path, tok: Any
) -> dict[str, Any]:
    """What a cache's tokens were made from; a cache whose key differs is rebuilt. The
    datasets count by their bytes and options (veri_tui/jobfolder/data/source.py
    `fingerprint`: a touched or moved file with the same rows is the same)."""
    sources = as_sources(dataset)
    try:
        data = fingerprint(sources)
    except FileNotFoundError as exc:
        raise DataError(f"{exc.filename}: dataset file not found") from None
    except OSError as exc:
        raise DataError(f"{exc.filename}: cannot read the dataset ({exc})") from None
    files = {n: manifest.sha256_file(f) for n in TOKENIZER_FILES if (f := model_dir / n).is_file()}
    here = Path(__file__).parent
    rules = here.parent / "jobfolder" / "data"
    paths = [here / n for n in ENCODERS] + [rules / n for n in ROW_RULES]
    code = hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()
    import tokenizers
    import transformers

    return {
        "format": FORMAT, "byteorder": sys.byteorder, "dataset": data, "method": method,
        "max_length": max_len, "encoder": code,
        "tokenizer": {
            "files": files,
            "class": type(tok).__name__, "eos_token_id": tok.eos_token_id,
            "chat_template": getattr(tok, "chat_template", None),
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
        },
    }  # fmt: skip


def stale_reason(folder: Path, key: dict[str, Any]) -> str | None:
    """Why the cache in `folder` cannot be reused ('none yet' when there is none), or None."""
    if not folder.is_dir():
        return NO_CACHE
    try:
        cache = TokenCache(folder)
    except CacheError as exc:
        return str(exc)
    old = cache.meta.get("key", {})
    for field, what in (("dataset", "the dataset changed"), ("method", "the method changed"),
                        ("max_length", "max_length changed"), ("tokenizer", "the tokenizer "
                        "changed"), ("encoder", "the trainer's tokenization changed")):  # fmt: skip
        if old.get(field) != key[field]:
            return what
    if old != key:
        return "its format changed"
    bad = manifest.problems(folder) or cache.problems()
    return bad[0] if bad else None


def build_part(
    dataset: Sources, method: str, tok: Any, max_len: int, folder: Path, part: int, parts: int
) -> dict[str, Any]:
    """Read every row, encode rows part, part + parts, ... into part `part`'s files; what
    the commit needs: {rows (the whole mixture's), part_rows, tokens, files}."""
    sources = as_sources(dataset)
    writer, total = PartWriter(folder, part), 0
    try:
        rows = mixed_rows(sources, method=method)
        while True:
            try:
                where, row = next(rows)
                if total % parts == part:
                    writer.add_row(encode_row(tok, row, where, method, max_len))
            except StopIteration:
                break
            except DataError as exc:
                exc.line = total + 1  # the mixture's row order: the ranks agree on the first
                raise
            total += 1
        if total == 0:
            raise DataError(f"{', '.join(s.label for s in sources)}: the dataset has no rows")
    except BaseException:
        writer.abandon()
        raise
    files = writer.close()
    return {"rows": total, "part_rows": writer.rows, "tokens": writer.tokens, "files": files}


def commit(
    folder: Path, final: Path, key: dict[str, Any], parts: list[dict[str, Any]], **extra: Any
) -> None:
    """Write meta.json (the key, the layout, `extra`) and the manifest into `folder`, then
    make it `final`, replacing an old cache. `parts`: build_part's results in part order."""
    rows = {p["rows"] for p in parts}
    if len(rows) != 1:  # the ranks read different files: never commit a mix
        raise DataError(f"the dataset changed while it was tokenized (rows: {sorted(rows)})")
    meta = {
        "key": key, "rows": rows.pop(), "parts": len(parts),
        "sequences_per_row": 2 if key["method"] == "dpo" else 1,
        "tokens": sum(p["tokens"] for p in parts), **extra,
    }  # fmt: skip
    write_json_atomic(folder / META, meta)
    manifest.write(folder, known={name: e for p in parts for name, e in p["files"].items()})
    if final.exists():
        shutil.rmtree(final)  # stale: a crash before the rename leaves no cache, never a mix
    folder.rename(final)
    fsync_dir(final.parent)


def exchange(ctx: RankContext, work: Callable[[], Any]) -> list[tuple[int, int, Any]]:
    """Run `work` here, then all-gather (node, local_rank, result) from every rank. A
    DataError on any rank is raised on every rank: the one of the first line in the file
    (as if each rank had checked every row), a plain DataError everywhere, so the job's
    failure line reads the same whichever rank is blamed (a subclass such as NothingToTrain
    named itself on the finder only). The rank that found it chains its own error, whose
    traceback shows where it was found."""
    err, mine = None, None
    try:
        mine = work()
    except DataError as exc:
        err = exc
    note = None if err is None else (err.line or 0, ctx.rank, err.message)
    got: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(got, (ctx.node, ctx.local_rank, mine, note))
    notes = sorted(g[3] for g in got if g[3] is not None)
    if notes:
        line, rank, message = notes[0]
        if err is not None and rank == ctx.rank:
            raise DataError(message, line or None) from err
        raise DataError(message, line or None)
    return [g[:3] for g in got]


def prepare_dataset(
    cfg: TrainConfig, ctx: RankContext, tok: Any, model_dir: Path, log: RankLog,
    sources: list[Source] | None = None, name: str = CACHE,
) -> TokenCache:  # fmt: skip
    """The job's rows (`sources`, default the training mixture), mapped from `<job_dir>/
    <name>/`: reused when valid, else built by this node's ranks; every rank calls it
    (collectives)."""
    sources = cfg.sources if sources is None else sources
    final, folder = cfg.job_dir / name, cfg.job_dir / f"{name}.tmp"
    what = "eval token cache" if name != CACHE else "token cache"
    t0 = time.perf_counter()
    if os.environ.get(SHARED_ENV) == "1":
        # Every node shares this folder (Slurm): one cache, built by all ranks as one node's.
        ctx = dataclasses.replace(ctx, node=0, local_rank=ctx.rank)

    def decide() -> dict[str, Any] | None:
        if ctx.local_rank != 0:
            return None
        key = cache_key(sources, cfg.method, cfg.max_length, model_dir, tok)
        reason = stale_reason(final, key)
        if reason is not None:  # start clean: a killed build may have left its folder
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        return {"key": key, "reason": reason}

    decided = exchange(ctx, decide)
    mine = next(r for node, local, r in decided if node == ctx.node and local == 0)
    parts = sum(1 for node, _, _ in decided if node == ctx.node)
    building = mine["reason"] is not None
    if any(r["reason"] is not None for _, local, r in decided if local == 0):

        def work() -> dict[str, Any] | None:
            if not building:  # this node reuses its cache; another node builds
                return None
            args = (sources, cfg.method, tok, cfg.max_length, folder, ctx.local_rank, parts)
            return build_part(*args)

        try:
            built = exchange(ctx, work)
        except DataError:
            if building and ctx.local_rank == 0:  # every rank has stopped writing by now
                shutil.rmtree(folder, ignore_errors=True)
            raise
        if building and ctx.local_rank == 0:
            ours = [r for _, r in sorted((lo, r) for n, lo, r in built if n == ctx.node)]
            commit(folder, final, mine["key"], ours, datasets=[s.to_dict() for s in sources])
        dist.barrier()  # committed on every node before any rank maps it
    cache = TokenCache(final)
    took = time.perf_counter() - t0
    if not building:
        log.info(f"data: {what} reused ({final}, {len(cache)} rows, checked in {took:.2f} s)")
        return cache
    if mine["reason"] != NO_CACHE:
        log.info(f"data: {what} not reused: {mine['reason']}")
    ranks = f"{parts} rank" + "s" * (parts != 1)
    log.info(f"data: tokenized {len(cache)} rows into {final} ({took:.2f} s, {ranks})")
    return cache
