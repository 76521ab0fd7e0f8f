"""Build the bundled tiny model and datasets under assets/ (deterministic, seeded).

Run `python scripts/make_tiny_model.py` to regenerate `assets/tiny-model/` (a randomly
initialised Qwen3-architecture causal LM with a byte-level BPE tokenizer trained on the
bundled text, saved with save_pretrained as safetensors), `assets/tiny-moe/` (the same
tokenizer on a randomly initialised Qwen3-MoE: one dense layer, then one layer of 8 routed
experts, 2 per token, saved in bf16) and `assets/data/*.jsonl`.
The text is synthetic and templated on purpose: a random-init model learns its patterns
within a few dozen CPU steps, which is what the trainer tests need to see.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED = 1234
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# A ChatML template: what `messages` rows are rendered through.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
COLORS = ["red", "blue", "green", "yellow", "black", "white"]
ANIMALS = ["cat", "dog", "fox", "owl", "bee", "cow", "hen", "pig"]
PLACES = ["forest", "river", "barn", "field", "garden", "hill"]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _fact(rng: random.Random) -> tuple[str, str]:
    """A (question, answer) pair from a small world the model can memorise."""
    kind = rng.randrange(3)
    if kind == 0:
        a, b = rng.randrange(5), rng.randrange(5)
        x, y = NUMBERS[a], NUMBERS[b]
        return f"What is {x} plus {y}?", f"{x} plus {y} is {NUMBERS[a + b]}."
    animal = rng.choice(ANIMALS)
    if kind == 1:
        place = PLACES[ANIMALS.index(animal) % len(PLACES)]
        return f"Where does the {animal} live?", f"The {animal} lives in the {place}."
    color = COLORS[ANIMALS.index(animal) % len(COLORS)]
    return f"What color is the {animal}?", f"The {animal} is {color}."


def make_datasets(rng: random.Random) -> dict[str, list[dict]]:
    """The four tiny datasets, one list of rows per file name."""
    sets: dict[str, list[dict]] = {"sft": [], "sft_messages": [], "sft_prompt_completion": []}
    for _ in range(64):
        q, a = _fact(rng)
        sets["sft"].append({"text": f"Question: {q} Answer: {a}"})
    for _ in range(32):
        q, a = _fact(rng)
        sets["sft_messages"].append(
            {
                "messages": [
                    {"role": "system", "content": "You answer in one sentence."},
                    {"role": "user", "content": q},
                    {"role": "assistant", "content": a},
                ]
            }
        )
        q, a = _fact(rng)
        row = {"prompt": f"Question: {q} Answer:", "completion": f" {a}"}
        sets["sft_prompt_completion"].append(row)
    dpo = []
    for _ in range(32):
        q, a = _fact(rng)
        wrong = a.replace(a.split()[-1], rng.choice(COLORS + PLACES + NUMBERS) + ".")
        if wrong == a:
            wrong = "I do not know."
        dpo.append({"prompt": f"Question: {q} Answer:", "chosen": f" {a}", "rejected": f" {wrong}"})
    sets["dpo"] = dpo
    return sets


def corpus(sets: dict[str, list[dict]]) -> list[str]:
    """Every string the tokenizer should cover, in a fixed order."""
    out: list[str] = []
    for rows in sets.values():
        for row in rows:
            for key in ("text", "prompt", "completion", "chosen", "rejected"):
                if key in row:
                    out.append(row[key])
            for m in row.get("messages", []):
                out.append(f"{m['role']}\n{m['content']}")
    return out


def build_tokenizer(texts: list[str], vocab_size: int):
    """Train a byte-level BPE on the bundled text and wrap it for save_pretrained."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _shape(vocab_size: int, eos_id: int) -> dict:
    """The config values both tiny models share: width, attention, positions, tokens."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 2048,  # the default max_seq_length fits without a warning
        "tie_word_embeddings": False,
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "pad_token_id": eos_id,
    }


def build_model(vocab_size: int, eos_id: int):
    """A randomly initialised Qwen3 of about 0.2M parameters (seeded)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(SEED)
    config = Qwen3Config(intermediate_size=192, **_shape(vocab_size, eos_id))
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def build_moe_model(vocab_size: int, eos_id: int):
    """A randomly initialised Qwen3-MoE of about 0.16M parameters (seeded), in bf16.

    Layer 0 is dense (`mlp_only_layers`), layer 1 holds 8 routed experts with 2 per token:
    both kinds of layer, the router and the experts, at a size the CPU tests train in
    seconds. bf16 halves the file (the trainer loads the base in bf16 anyway).
    """
    import torch
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    torch.manual_seed(SEED)
    config = Qwen3MoeConfig(
        intermediate_size=128,  # the dense layer's MLP
        moe_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[0],
        **_shape(vocab_size, eos_id),
    )
    return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def portable_moe_config(folder: Path) -> None:
    """Write the expert count as `num_experts`, Qwen's own key (Qwen3-30B-A3B's config.json).

    transformers 5 saves it as `num_local_experts` (its attribute_map's name), which 4.x's
    Qwen3MoeConfig does not read: it would build its default 128 experts. Both read
    `num_experts`.
    """
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    if "num_local_experts" in cfg:
        cfg["num_experts"] = cfg.pop("num_local_experts")
    path.write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")


def drop_writer_version(folder: Path) -> None:
    """Leave out `transformers_version` (the writer's version, which no loader reads).

    save_pretrained stamps the installed release into config.json and
    generation_config.json, so every transformers release would change the bundled files'
    bytes (and fail their byte-for-byte rebuild test) with nothing in the model changed.
    The files are rewritten as transformers writes them (indent 2, keys sorted).
    """
    for name in ("config.json", "generation_config.json"):
        path = folder / name
        cfg = json.loads(path.read_text())
        cfg.pop("transformers_version", None)
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def portable_tokenizer_config(folder: Path) -> None:
    """Name a class every transformers release knows, and keep the chat template inline.

    transformers 5 writes `TokenizersBackend`, which 4.x cannot resolve; the GPU machine
    and older installs may run 4.x. Both majors load `PreTrainedTokenizerFast` and read
    `chat_template` from tokenizer_config.json.
    """
    path = folder / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg.pop("backend", None)
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg["model_max_length"] = 2048
    path.write_text(json.dumps(cfg, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Write assets/tiny-model and assets/data (or under --out)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "veri_tui" / "assets")
    args = parser.parse_args(argv)
    rng = random.Random(SEED)
    sets = make_datasets(rng)
    data_dir = args.out / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in sets.items():
        with open(data_dir / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    tok = build_tokenizer(corpus(sets), vocab_size=512)
    # Round the embedding up to a multiple of 64 so shapes stay friendly to kernels.
    vocab = (len(tok) + 63) // 64 * 64
    model = build_model(vocab, tok.eos_token_id)
    out = args.out / "tiny-model"
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    portable_tokenizer_config(out)
    drop_writer_version(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {out} ({n} parameters, vocab {vocab}) and {len(sets)} datasets in {data_dir}")
    moe = build_moe_model(vocab, tok.eos_token_id)
    moe_out = args.out / "tiny-moe"
    moe.save_pretrained(moe_out, safe_serialization=True)
    portable_moe_config(moe_out)
    tok.save_pretrained(moe_out)
    portable_tokenizer_config(moe_out)
    drop_writer_version(moe_out)
    n = sum(p.numel() for p in moe.parameters())
    print(f"wrote {moe_out} ({n} parameters: 8 routed experts, 2 per token)")


if __name__ == "__main__":
    main()
