"""`veri-tui export JOB`: what the launcher side writes beside the exported model.

card.py writes the model card; hub.py pushes the folder through huggingface_hub. The torch
work (veri_tui/trainer/merge.py folds a LoRA adapter into the base one tensor at a time,
veri_tui/trainer/smoke.py generates from base and tuned) runs as `python -m
veri_tui.trainer.export`; veri_tui/commands/export.py ties them together (docs/export.md).
"""
