"""A learnable synthetic task, the bundled trainer on it, and Hugging Face Trainer aligned to it.

The task: each row counts through a ring of WORDS words with a stride of its own (1 to 4),
from a random start, so after two words every next one is determined. The model: a
Qwen3-shaped one built from DIMS (random init, std 0.02, saved in bf16 like a released
checkpoint) with a word-level tokenizer. Used by tests/trainer/test_bf16_learning.py and
benchmarks/bench_bf16_learning.py.

Run as a script (`python learning_task.py hf=JOB.json ... veri=JOB.json ...`), it trains
each job in turn in one process: `veri` through the trainer's own `train()` (as
trainer_jobs.py does, a process group of one), `hf` with transformers' Trainer at the
bundled trainer's settings: the same rows in the same order (veri_tui.trainer.data.global_batch),
the same batches padded the same way (veri_tui.trainer.data.collate), the loss averaged over the
step's target tokens, AdamW with the weight decay on every parameter (HF leaves norms and
biases out by default; ours decays all), warm-up 0 then cosine to 0, clipping at 1.0, and
LoRA adapters initialised from the same seed. `bf16=True` there is fp32 master weights and
AdamW under bf16 autocast.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
WORDS = 48
# 1.2M parameters: wide enough to learn visibly at lr 2e-5 in 80 steps (Adam moves each
# weight by about lr a step, and a wider layer sums more of those moves).
DIMS = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 64,
    "tie_word_embeddings": False,
    "max_position_embeddings": 256,
}
EOS = "<eos>"


def make_task(
    folder: Path, *, rows: int = 256, length: int = 16, seed: int = 0
) -> tuple[Path, Path]:
    """Write the model folder and the dataset (kept if already complete); returns both."""
    model, data = folder / "model", folder / "task.jsonl"
    if (folder / ".complete").is_file():
        return model, data
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

    vocab = {EOS: 0, **{f"w{i}": i + 1 for i in range(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=EOS))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    torch.manual_seed(seed)
    config = Qwen3Config(**DIMS, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    net = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.mkdir(parents=True, exist_ok=True)
    net.save_pretrained(model)
    fast.save_pretrained(model)
    rng = random.Random(seed)
    lines = []
    for _ in range(rows):
        start, stride = rng.randrange(WORDS), rng.randint(1, 4)
        words = [f"w{(start + i * stride) % WORDS}" for i in range(length)]
        lines.append(json.dumps({"text": " ".join(words)}))
    data.write_text("\n".join(lines) + "\n")
    (folder / ".complete").write_text("ok\n")
    return model, data


def hf_spec(job: dict[str, Any]) -> dict[str, Any]:
    """What the HF run needs from a job.json written by trainer_jobs.write_job."""
    spec = job["spec"]
    hp = {**spec["hyperparameters"], **spec["resolved_parallelism"]}
    return {
        "model": spec["model_path"],
        "dataset": spec["dataset"],
        "learning_rate": float(hp["learning_rate"]),
        "weight_decay": float(hp.get("weight_decay", 0.0)),
        "max_steps": int(hp["max_steps"]),
        "global_batch_size": int(hp["global_batch_size"]),
        "seed": int(hp.get("seed", 42)),
        "lora_rank": int(hp.get("lora_rank", 0)),
        "lora_alpha": float(hp.get("lora_alpha") or 2 * int(hp.get("lora_rank", 0))),
        "max_length": int(hp.get("max_seq_length", 1024)),
    }


def train_hf(spec: dict[str, Any], out: Path) -> list[float]:
    """Hugging Face Trainer with bf16=True at the bundled trainer's settings; the losses."""
    import torch
    from torch.utils.data import IterableDataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from veri_tui.trainer.data import IGNORE, collate, global_batch, load_dataset
    from veri_tui.trainer.model import load_tokenizer as veri_tokenizer
    from veri_tui.trainer.model import lora_targets

    model_dir = Path(spec["model"])
    tok = veri_tokenizer(model_dir)
    rows = load_dataset(Path(spec["dataset"]), "sft_text", tok, spec["max_length"])
    gbs, steps, seed = spec["global_batch_size"], spec["max_steps"], spec["seed"]
    order = [rows[i] for s in range(steps) for i in global_batch(len(rows), gbs, seed, s)]

    class Ordered(IterableDataset):  # no sampler: the rows come exactly in this order
        def __iter__(self) -> Any:
            return iter(order)

    def collator(examples: list[Any]) -> dict[str, torch.Tensor]:
        batch = collate(examples, tok.pad_token_id)
        batch["labels"][:, 0] = IGNORE  # never a target; so any version counts as ours do
        return batch

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="sdpa"
    )
    model.config.use_cache = False
    if spec["lora_rank"]:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(seed)  # as the bundled trainer seeds before peft draws lora_A
        lora = LoraConfig(
            r=spec["lora_rank"], lora_alpha=spec["lora_alpha"], lora_dropout=0.0,
            target_modules=lora_targets(model)[0], task_type="CAUSAL_LM",
        )  # fmt: skip
        model = get_peft_model(model, lora)

    class AllDecay(Trainer):  # the bundled trainer decays every trained parameter
        def get_decay_parameter_names(self, model: Any) -> list[str]:
            return [n for n, _ in model.named_parameters()]

    args = TrainingArguments(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=gbs,
        learning_rate=spec["learning_rate"], weight_decay=spec["weight_decay"],
        lr_scheduler_type="cosine", warmup_steps=0, max_grad_norm=1.0, bf16=True,
        use_cpu=True, logging_steps=1, save_strategy="no", report_to=[], seed=seed,
        remove_unused_columns=False, dataloader_num_workers=0, disable_tqdm=True,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, optim="adamw_torch",
    )  # fmt: skip
    trainer = AllDecay(model=model, args=args, train_dataset=Ordered(), data_collator=collator)
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def _main(items: list[str]) -> None:
    """Train each `hf=JOB.json` (first) and `veri=JOB.json` (then, in one process group)."""
    hf = [Path(i.removeprefix("hf=")) for i in items if i.startswith("hf=")]
    veri = [i.removeprefix("veri=") for i in items if i.startswith("veri=")]
    for p in hf:
        losses = train_hf(hf_spec(json.loads(p.read_text())), p.parent / "hf")
        (p.parent / "hf_losses.json").write_text(json.dumps(losses))
    if veri:  # after HF's: the trainer joins a process group of one and leaves it at the end
        sys.path.insert(0, str(Path(__file__).parent))
        from trainer_jobs import _train_each

        _train_each(veri)


if __name__ == "__main__":
    _main(sys.argv[1:])
