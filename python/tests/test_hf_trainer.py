"""A Hugging Face ``transformers.Trainer`` run profiled by ``python -m trainprof
run`` without a line of trainprof in it: its steps are its optimizer's (AdamW,
which the Trainer steps through accelerate's optimizer wrapper), and every
step's transformer forward and backward and AdamW update are recorded."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import op_statistic, run_dirs, trace_events

pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # Trainer refuses to run without it

OPTIMIZER_STEPS = 6
LAYERS = 2

# A tiny BERT initialised at random from its config (nothing is downloaded)
# trained on random token sequences. Eager attention: its matmul and softmax
# operators, where SDPA would pick a kernel by machine.
TRAIN_SCRIPT = f'''
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RandomSequences(torch.utils.data.Dataset):
    def __init__(self, n, length=16, vocab=100):
        gen = torch.Generator().manual_seed(0)
        self.input_ids = torch.randint(0, vocab, (n, length), generator=gen)
        self.labels = torch.randint(0, 2, (n,), generator=gen)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {{"input_ids": self.input_ids[i], "attention_mask": torch.ones_like(self.input_ids[i]),
                 "labels": self.labels[i]}}


def main():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers={LAYERS}, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=32, attn_implementation="eager")
    args = TrainingArguments(output_dir="trainer_out", max_steps={OPTIMIZER_STEPS}, per_device_train_batch_size=4,
                             report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                             disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=RandomSequences(48))
    print("trained", trainer.train().global_step)


if __name__ == "__main__":
    main()
'''

# AdamW's parameter update, one operator per implementation torch may pick
# (fused, foreach, a loop over the parameters).
ADAMW_UPDATES = {"aten::_fused_adamw_", "aten::_foreach_addcdiv_", "aten::addcdiv_"}


def contains(outer: dict, inner: dict) -> bool:
    """``inner`` is a range within ``outer`` on the same thread."""
    return (inner.get("tid") == outer.get("tid") and outer["ts"] <= inner["ts"]
            and inner["ts"] + inner.get("dur", 0) <= outer["ts"] + outer["dur"])


def test_a_hugging_face_trainer_run_is_profiled_with_steps_from_its_optimizer(tmp_path: Path) -> None:
    script = tmp_path / "train_hf.py"
    script.write_text(TRAIN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRAINPROF_OPTIONS"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    # `run`'s default options: the whole process analysed into ./data, the DataLoader's stages with it
    result = subprocess.run([sys.executable, "-m", "trainprof", "run", str(script)], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    assert f"trained {OPTIMIZER_STEPS}" in result.stdout

    (run_dir,) = run_dirs(tmp_path / "data")
    with open(run_dir / "PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
        steps = [int(row["Step"]) for row in csv.DictReader(f)]
    # No schedule: a step between each two optimizer.step() calls. The
    # start-up (imports, set-up, the first batch, to the first one) and the
    # tail (from the last one to the exit) are in the timeline, not steps.
    assert steps == list(range(1, OPTIMIZER_STEPS))
    events = trace_events(run_dir)
    annotations = [e for e in events if e.get("cat") == "user_annotation"]
    step_ranges = sorted((e for e in annotations if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    assert [e["name"] for e in step_ranges] == [f"ProfilerStep#{n}" for n in range(OPTIMIZER_STEPS + 1)]

    # Each step ends after AdamW's step (torch's range for it), the last one has none.
    optimizer_ranges = [e for e in annotations if e["name"].startswith("Optimizer.step#")]
    assert Counter(e["name"] for e in optimizer_ranges) == {"Optimizer.step#AdamW.step": OPTIMIZER_STEPS}
    assert [sum(contains(s, o) for o in optimizer_ranges) for s in step_ranges] == [1] * OPTIMIZER_STEPS + [0]
    cpu_ops = [e for e in events if e.get("cat") == "cpu_op"]
    for optimizer_range in optimizer_ranges:  # the parameter update is recorded inside each
        assert {e["name"] for e in cpu_ops if contains(optimizer_range, e)} & ADAMW_UPDATES

    # Every step's forward and backward of the transformer: per step an
    # embedding for the tokens, the positions and the token types, a layer
    # norm after the embeddings and two per layer, an attention softmax per
    # layer; each with its backward.
    ops = {name: int(row["Count"]) for name, row in op_statistic(run_dir).items()}
    per_step = {"aten::embedding": 3, "aten::native_layer_norm": 1 + 2 * LAYERS, "aten::softmax": LAYERS}
    assert {op: ops.get(op) for op in per_step} == {op: n * OPTIMIZER_STEPS for op, n in per_step.items()}
    backward = {"EmbeddingBackward0": "aten::embedding", "NativeLayerNormBackward0": "aten::native_layer_norm",
                "SoftmaxBackward0": "aten::softmax"}
    assert {op: ops.get(op) for op in backward} == {op: ops[forward] for op, forward in backward.items()}
    assert {"aten::addmm", "aten::matmul", "aten::gelu", "AddmmBackward0"} <= set(ops)

    # The Trainer's DataLoader: the dataset is read for every step's batch
    # (and, with accelerate, for one more: it looks a batch ahead for the end).
    with open(run_dir / "PROFILER_OUTPUT" / "dataset.csv", newline="") as f:
        reads = {(r["Operation"], r["Stage"]): int(r["Occurrences"]) for r in csv.DictReader(f)}
    assert reads.get(("RandomSequences", "dataset"), 0) >= OPTIMIZER_STEPS
