"""The attention-kernel probe of benchmarks/gpu_check_kernels.py: the shapes it probes and
how the counts are named. Its child program runs for real in the check's CPU mode
(test_gpu_check_cpu.py: the tiny model's step on CPU, where SDPA dispatches a flash kernel
of its own)."""

from __future__ import annotations

from pathlib import Path

import gpu_check_kernels


def test_one_probe_per_model_at_its_longest_sequence(tmp_path: Path) -> None:
    plan = {"runs": [{"shape": "a", "seq": 1024}, {"shape": "a", "seq": 2048},
                     {"shape": "b", "seq": 1024}]}  # fmt: skip
    assert gpu_check_kernels.specs(plan, tmp_path) == [
        {"shape": "a", "folder": str(tmp_path / "models/a"), "seq": 2048},
        {"shape": "b", "folder": str(tmp_path / "models/b"), "seq": 1024},
    ]
    assert gpu_check_kernels.kernel_of({"aten::_scaled_dot_product_attention_math": 2}) == "math"
    mixed = {
        "aten::_scaled_dot_product_efficient_attention": 28,
        "aten::_efficient_attention_backward": 28,
    }
    assert gpu_check_kernels.kernel_of(mixed) == "memory-efficient"
    assert gpu_check_kernels.kernel_of({}) == "no attention op seen"
