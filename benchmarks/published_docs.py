"""Published multi-GPU peaks that peft's docs and THUDM's fine-tuning READMEs (ChatGLM3,
GLM-4) state, none of them expressible by the knobs as the source ran it (FSDP1, sums over
GPUs, offload under ZeRO-3, unstated lengths): each with its reason (issue 19). Every quote
as read (benchmarks/published_memory.py gathers them).
"""

from __future__ import annotations

from published_types import Unexpressed
from published_zero import PEFT_DS

PEFT_FSDP = ("huggingface/peft", "docs/source/accelerate/fsdp.md",
             "018ca9d6f6dc9e77c7e458af816bd27681f7874d")  # fmt: skip
CHATGLM3_FT = ("THUDM/ChatGLM3", "finetune_demo/README.md",
               "07e8993a888a472a327b579b8c50fe624834182c")  # fmt: skip
GLM4_FT = ("THUDM/GLM-4", "finetune_demo/README_en.md",
           "081f0fb96c4cfa6390797c2e214282e1533c9738")  # fmt: skip

NOT_EXPRESSED: list[Unexpressed] = [
    Unexpressed(
        "peft-llama2-70b-lora-fsdp-h100x8",
        PEFT_FSDP,
        "In the above example, the memory consumed per GPU is 72-80 GB (90-98%) as seen in the "
        "screenshot below. (fsdp_offload_params: false, mixed_precision: bf16, "
        "--per_device_train_batch_size 8, --max_seq_len 2048, --lora_r 8)",
        "72-80 GB",
        "a range off a chart, rising at the end to save a FULL_STATE_DICT; and FSDP1's mixed "
        "precision keeps the sharded weights as loaded, in float32 (examples/sft/utils.py: "
        "torch_dtype = ... torch.float32), where the knobs hold a LoRA base in bf16",
    ),
    Unexpressed(
        "peft-llama2-70b-qlora-fsdp-offload-2gpu",
        PEFT_FSDP,
        "In the above example, the memory consumed per GPU is **19.6 GB** while CPU RAM usage "
        "is around **107 GB**. When disabling CPU offloading, the GPU memory usage is  **35.6 "
        "GB/ GPU**. (fsdp_offload_params: true, num_processes: 2, --use_4bit_quantization True)",
        "19.6 GB (offload), 35.6 GB (no offload)",
        "QLoRA over FSDP on 2 GPUs: the knobs take load_in_4bit on one GPU only (bitsandbytes "
        "NF4 stored as bf16 words, bnb_4bit_quant_storage_dtype bfloat16, and sharded); the "
        "only published cpu_offload peak found here",
    ),
    Unexpressed(
        "peft-llama2-70b-qlora-zero3-2gpu",
        PEFT_DS,
        "In the above example, the memory consumed per GPU is **36.6 GB**. (zero_stage: 3, "
        "offload_param_device: none, num_processes: 2, --use_4bit_quantization True)",
        "36.6 GB",
        "QLoRA under DeepSpeed ZeRO-3 on 2 GPUs: load_in_4bit is one GPU only in the knobs",
    ),
    Unexpressed(
        "chatglm3-6b-sft-zero3-x4",
        CHATGLM3_FT,
        "SFT 全量微调: 4张显卡平均分配，每张显卡占用 `48346MiB` 显存。 (configs/sft.yaml: "
        "per_device_train_batch_size: 4, max_input_length: 256, max_output_length: 512, "
        "deepspeed: ds_zero_3.json)",
        "48346 MiB",
        "the two stored versions of configs/ds_zero_3.json differ "
        "(3b52b255a1 offloads the optimizer and the parameters to the CPU, b23d105373 does "
        "not) and neither is dated against the README's figure; its bf16 is `auto` while "
        "sft.yaml sets no bf16, and the README casts the trainable weights to fp32 "
        "(_prepare_model_for_training); checkpointing is not read; training and the "
        "generate-based evaluation (predict_with_generate) share the processes (sft.yaml as "
        "read at 0a76162503)",
        "Not judged",
    ),
    Unexpressed(
        "glm-4-9b-sft-zero3-a100x8",
        GLM4_FT,
        "GPU: NVIDIA A100-SXM4-80GB * 8 ... | SFT (Zero3 method) | 80935MiB<br/>(Each GPU, 8 "
        "GPUs are required) | 20G |",
        "80935 MiB",
        "80935 MiB is all but the A100's 81920: the device full, not the step's need; "
        "configs/ds_zero_3.json is not readable here, and finetune.py's evaluation generates "
        "(predict_with_generate, per_device_eval_batch_size 16, max_new_tokens 512) in the "
        "same processes (configs/sft.yaml as read at 0b80c79b8c)",
        "Not judged",
    ),
]
