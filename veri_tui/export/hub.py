"""`--push-to-hub REPO`: the export folder uploaded through huggingface_hub.

Checked before any work (a merge can take minutes): offline mode (HF_HUB_OFFLINE) and a
missing token are each one line naming the way out. The upload itself creates the repo
if needed (private unless it exists) and uploads the folder in one commit; a refusal by
the Hub (a bad token, no rights on the namespace, no network) is one line too.
"""

from __future__ import annotations

import os
from pathlib import Path

from veri_tui.errors import VeriError

_ON = ("1", "ON", "YES", "TRUE")


def check_push(repo: str) -> None:
    """VeriError (one line) when a push to `repo` cannot happen from here."""
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise VeriError(f"{repo!r} is not a Hub repo id; use owner/name", key="push-to-hub")
    try:
        from huggingface_hub import constants, get_token
    except ImportError:
        raise VeriError("--push-to-hub needs huggingface_hub: pip install 'veri-tui[train]'",
                        key="push-to-hub") from None  # fmt: skip

    # The constant is read once, at huggingface_hub's import: the variable may be newer.
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in _ON:
        why = "HF_HUB_OFFLINE is set: no push in offline mode; unset it, or export without "
        raise VeriError(why + "--push-to-hub and upload the folder later", key="push-to-hub")
    if not get_token():
        raise VeriError("no Hugging Face token; run `hf auth login` or set HF_TOKEN, then "
                        "export again", key="push-to-hub")  # fmt: skip


def push(folder: Path, repo: str, message: str) -> str:
    """Upload `folder` to model repo `repo`; the commit's URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi()
    try:
        api.create_repo(repo, repo_type="model", private=True, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                                 commit_message=message)  # fmt: skip
    except (HfHubHTTPError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VeriError(f"{repo}: the push failed ({first}); the export stays in {folder}",
                        key="push-to-hub") from None  # fmt: skip
    return str(getattr(info, "commit_url", "") or f"https://huggingface.co/{repo}")
