"""A dataset's tokens, counted as the bundled trainer feeds them, cached by content hash.

The trainer (veri_tui/trainer/data.py) turns a row into token ids with the model's AutoTokenizer:
`text` + EOS; `prompt` + `completion` + EOS; `messages` rendered turn by turn through the
chat template; dpo `prompt` + `chosen`/`rejected` + EOS, each pair member on its own. Here
the same segments go through the `tokenizers` package (the Rust tokenizer a fast
AutoTokenizer wraps: same tokenizer.json, same ids), special tokens only on a sequence's
first segment, as the trainer adds them. Differences (docs/planning.md, Cost): a tokenizer
class that rewrites its post-processor from tokenizer_config.json (Llama's add_bos_token)
is read as tokenizer.json says; chat templates are rendered with jinja2 as transformers
renders them, without its custom filters.

Lengths are stored untruncated (per row; dpo: chosen and rejected), so truncation at
max_seq_length / max_length is applied when planning and the cache does not depend on it.
The cache is `$VERI_HOME/cache/tokens/<sha256>.json`, keyed by the dataset's bytes, the
tokenizer files and the method; a cache hit reads JSON and never imports tokenizers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic_core import from_json

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.contract.layout import veri_home
from veri_tui.jobfolder.data.rows import no_shape, text_field
from veri_tui.jobfolder.data.source import Source, as_sources, fingerprint, stat_key

if TYPE_CHECKING:
    from veri_tui.plan.chat import ChatTemplate


Sources = list[Source] | str | Path


def describe_sources(sources: list[Source]) -> str:
    """The sources as one name (a message's subject)."""
    return ", ".join(s.label for s in sources)


CACHE_VERSION = 2  # 2: keyed by the sources' fingerprint (veri_tui/jobfolder/data/source.py)
CHUNK = 8192  # texts per encode_batch call
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
# In-process memo for re-plans on every keystroke: (file stats, method) -> the count, or the
# error counting it raised (so a re-plan reports it without counting again).
_MEMO: dict[tuple[Any, ...], TokenCount | DataError | ImportError] = {}
_ROWS: dict[tuple[Any, ...], int] = {}


class TokenCount(NamedTuple):
    """Untruncated token lengths of a dataset's rows, as a histogram.

    sft_text: `lengths` holds (tokens, rows); dpo: (chosen tokens, rejected tokens, rows)."""

    rows: int
    method: str
    lengths: tuple[tuple[int, ...], ...]
    cached: bool = False


def count_rows(sources: Sources) -> int:
    """The rows the trainer reads (no tokenizer needed), remembered by the files' stats."""
    from veri_tui.jobfolder.data.dataload import mixed_count

    sources = as_sources(sources)
    key = ("rows", stat_key(sources))
    if key not in _ROWS:
        _ROWS[key] = mixed_count(sources)
    return _ROWS[key]


def cache_dir() -> Path:
    """`$VERI_HOME/cache/tokens` (VERI_HOME defaults to ~/.veri)."""
    return veri_home() / "cache" / "tokens"


def tokenizer_path(model_dir: str | Path | None) -> Path | None:
    """The model's tokenizer.json, or None when the model folder has none."""
    if not model_dir:
        return None
    path = Path(model_dir) / "tokenizer.json"
    return path if path.is_file() else None


def _stat_key(path: Path) -> tuple[Any, ...]:
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns, st.st_ino)


def _content_key(sources: list[Source], model_dir: Path, method: str) -> str:
    import hashlib  # only with a dataset: OpenSSL's module costs a plain plan ~5 ms

    digest = hashlib.sha256(f"veri-tokens-v{CACHE_VERSION}:{method}\0".encode())
    # The contents, not the names: the same rows under another name are the same count.
    digest.update(fingerprint(sources).encode() + b"\0")
    for label, path in ((n, model_dir / n) for n in TOKENIZER_FILES):
        digest.update(label.encode() + b"\0")
        if path.is_file():
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
        digest.update(b"\0end\0")
    return digest.hexdigest()


def _from_cache(path: Path, method: str) -> TokenCount | None:
    try:
        data = from_json(path.read_bytes())
        if data.get("version") != CACHE_VERSION or data.get("method") != method:
            return None
        lengths = tuple(tuple(int(x) for x in entry) for entry in data["lengths"])
        return TokenCount(int(data["rows"]), method, lengths, cached=True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing or unreadable: count again and write it anew


def cached_count(sources: Sources, model_dir: str | Path, method: str) -> TokenCount | None:
    """The count from the in-process memo or the disk cache; None when it must be counted.
    Never imports tokenizers (the cheap path a re-plan takes)."""
    sources = as_sources(sources)
    dataset, model_dir = sources, Path(model_dir)
    memo_key = (stat_key(sources), _stat_key(model_dir / "tokenizer.json"), method)
    if memo_key in _MEMO:
        found = _MEMO[memo_key]
        if isinstance(found, Exception):
            raise found.with_traceback(None)
        return found
    cached = _from_cache(cache_dir() / f"{_content_key(dataset, model_dir, method)}.json", method)
    if cached is not None:
        _MEMO[memo_key] = cached
    return cached


def count_tokens(sources: Sources, model_dir: str | Path, method: str) -> TokenCount:
    """Count (or fetch from the cache) the tokens of every row; DataError for a bad row
    or a tokenizer that cannot be used, ImportError without the tokenizers package."""
    sources = as_sources(sources)
    dataset, model_dir = sources, Path(model_dir)
    found = cached_count(dataset, model_dir, method)
    if found is not None:
        return found
    key = _content_key(dataset, model_dir, method)
    memo_key = (stat_key(sources), _stat_key(model_dir / "tokenizer.json"), method)
    try:
        count = _count(dataset, model_dir, method)
    except (DataError, ImportError) as exc:
        _MEMO[memo_key] = exc  # until the file changes
        raise
    _MEMO[memo_key] = count
    data = {
        "version": CACHE_VERSION,
        "method": method,
        "rows": count.rows,
        "dataset": [src.to_dict() for src in sources],
        "model": str(model_dir),
        "lengths": [list(entry) for entry in count.lengths],
    }
    try:
        from veri_tui.jobfolder.contract.atomic import write_json_atomic

        cache_dir().mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache_dir() / f"{key}.json", data)
    except OSError:
        pass  # a read-only home only costs the next plan a recount
    return count


def _special(config: dict[str, Any], key: str) -> str | None:
    value = config.get(key)
    if isinstance(value, dict):  # {"content": "<|endoftext|>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


def _tokenizer_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        data = from_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: unreadable tokenizer config ({exc})") from None
    return data if isinstance(data, dict) else {}


def _lengths(tok: Any, texts: list[str], special: bool) -> list[int]:
    """Token counts of `texts`: each distinct text encoded once (repeated system prompts and
    prompts are common), in chunks so that the Encoding objects never pile up."""
    unique: dict[str, int] = dict.fromkeys(texts, 0)
    keys = list(unique)
    for i in range(0, len(keys), CHUNK):
        part = keys[i : i + CHUNK]
        encoded = tok.encode_batch(part, add_special_tokens=special)
        for text, enc in zip(part, encoded, strict=True):
            unique[text] = len(enc)
    return [unique[t] for t in texts]


def _count(sources: list[Source], model_dir: Path, method: str) -> TokenCount:
    from collections import Counter

    from tokenizers import Tokenizer  # only on a cache miss: ~15 ms to import

    from veri_tui.jobfolder.data.dataload import mixed_rows
    from veri_tui.plan.chat import ChatTemplate, chat_segments

    try:
        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    except Exception as exc:  # noqa: BLE001 - the Rust side raises a plain Exception
        raise DataError(f"{model_dir / 'tokenizer.json'}: cannot load ({exc})") from None
    config = _tokenizer_config(model_dir)
    eos = 1 if _special(config, "eos_token") else 0  # the trainer appends one EOS id
    firsts: list[str] = []  # the first segment of a sequence: special tokens added
    rests: list[str] = []
    plan: list[tuple[Any, ...]] = []
    template: ChatTemplate | None = None
    for where, row in mixed_rows(sources, from_json, method):
        if method == "dpo":
            texts = [text_field(row, key, where) for key in ("prompt", "chosen", "rejected")]
            plan.append(("dpo", len(firsts), len(rests)))
            firsts.append(texts[0])
            rests.extend(texts[1:])
        elif "messages" in row:
            if template is None:
                template = ChatTemplate.load(model_dir, config, where)
            head, tail = chat_segments(template, row["messages"], where)
            plan.append(("chat", len(firsts), len(rests), len(tail)))
            firsts.append(head)
            rests.extend(tail)
        elif "prompt" in row or "completion" in row:
            plan.append(("pc", len(firsts), len(rests)))
            firsts.append(text_field(row, "prompt", where))
            rests.append(text_field(row, "completion", where))
        elif "text" in row:
            plan.append(("text", len(firsts)))
            firsts.append(text_field(row, "text", where))
        else:
            raise no_shape(row, where)
    if not plan:
        raise DataError(f"{describe_sources(sources)}: the dataset has no rows")
    first = _lengths(tok, firsts, special=True)
    rest = _lengths(tok, rests, special=False)
    hist: Counter[tuple[int, ...]] = Counter()
    for entry in plan:
        shape, f = entry[0], first[entry[1]]
        if shape == "text":
            hist[(f + eos,)] += 1
        elif shape == "pc":
            hist[(f + rest[entry[2]] + eos,)] += 1
        elif shape == "chat":
            hist[(f + sum(rest[entry[2] : entry[2] + entry[3]]),)] += 1
        else:
            hist[(f + rest[entry[2]] + eos, f + rest[entry[2] + 1] + eos)] += 1
    lengths = tuple((*k, c) for k, c in sorted(hist.items()))
    return TokenCount(len(plan), method, lengths)
