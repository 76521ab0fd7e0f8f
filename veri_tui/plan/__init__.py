"""The pure planning core: knobs, validation, model info, GPU catalog, memory, the plan.

Imports only the standard library, the knob schema (veri_tui/jobfolder/knobs) and pydantic_core
(pydantic lazily, to check a value not already of its knob's type; huggingface_hub lazily,
for Hub-only models): never torch or textual, so `veri-tui plan` and the app start fast.
The public API is what docs/interfaces.md section 1 lists.
"""

from veri_tui.jobfolder.knobs import PIN_KEYS
from veri_tui.jobfolder.knobs.lora_targets import LORA_TARGETS
from veri_tui.plan.api import plan, throughput_sweep
from veri_tui.plan.config import job_from_fields, load_job_config
from veri_tui.plan.gpus import GPU, GPU_CATALOG, get_gpu
from veri_tui.plan.knobs import Hyperparameters, JobConfig
from veri_tui.plan.model_info import ModelInfo
from veri_tui.plan.model_sources import read_model_info
from veri_tui.plan.record import PlanRecord
from veri_tui.plan.resolve import plan_job
from veri_tui.plan.toml_writer import job_to_toml
from veri_tui.plan.validate import validate

__all__ = [
    "GPU",
    "GPU_CATALOG",
    "LORA_TARGETS",
    "PIN_KEYS",
    "Hyperparameters",
    "JobConfig",
    "ModelInfo",
    "PlanRecord",
    "get_gpu",
    "job_from_fields",
    "job_to_toml",
    "load_job_config",
    "plan",
    "plan_job",
    "read_model_info",
    "throughput_sweep",
    "validate",
]
