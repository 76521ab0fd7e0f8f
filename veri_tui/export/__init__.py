"""`veri-tui export JOB`: a finished job's artifact as a model to serve or share.

merge.py folds a LoRA adapter into the base checkpoint shard by shard; smoke.py generates
from base and tuned on a few of the job's prompts; card.py writes the model card; hub.py
pushes the folder through huggingface_hub. veri_tui/commands/export.py ties them together
(docs/export.md).
"""
