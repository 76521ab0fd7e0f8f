"""The bundled trainer, run under torchrun: sft_text and dpo with DDP or FSDP2.

Imports torch, transformers, peft and safetensors; never textual or paramiko.
"""
