"""Training the learned shapes judge from scratch: resumable, checkpointed outside the repo.

The judge is asked exactly what soft-tifa asks — the atom's question plus " Answer in one word."
in the chat template, generation prompt added — and trained with cross-entropy on its
last-position logits against the oracle's one-word answer, the very position soft-tifa reads its
soft score from. Each step's batch is drawn from a generator seeded by (seed, step), so a resumed
run sees the batches the uninterrupted one would have.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Callable

from cast_shapes.judge_data import SUFFIX, JudgeExample, heldout_examples, scene_examples


def chat_texts(processor, examples) -> list[str]:
    return [
        processor.apply_chat_template(
            [
                {
                    "role": "user",
                    "content": [{"type": "image", "image": None}, {"type": "text", "text": e.question + SUFFIX}],
                }
            ],
            add_generation_prompt=True,
            tokenize=False,
        )
        for e in examples
    ]


def encode(processor, examples) -> dict:
    from PIL import Image

    images = [Image.fromarray(e.image.transpose(1, 2, 0)) for e in examples]
    return processor(text=chat_texts(processor, examples), images=images, padding=True, return_tensors="pt")


def answer_ids(processor, examples):
    import torch

    return torch.tensor([processor.tokenizer.convert_tokens_to_ids(e.answer) for e in examples])


def batch_for_step(seed: int, step: int, size: int) -> list[JudgeExample]:
    rng = random.Random(f"judge {seed} {step}")
    out: list[JudgeExample] = []
    while len(out) < size:
        out.extend(scene_examples(rng, "train", rng.randint(2, 8)))
    rng.shuffle(out)
    return out[:size]


def accuracy(model, processor, examples, batch: int = 128) -> dict[str, float]:
    """Share of examples whose most likely answer token is the oracle's, per atom kind."""
    import torch

    hits: dict[str, list[bool]] = {}
    model.eval()
    with torch.no_grad():
        for i in range(0, len(examples), batch):
            part = examples[i : i + batch]
            pred = model(**encode(processor, part), logits_to_keep=1).logits[:, -1].argmax(-1)
            for e, ok in zip(part, (pred == answer_ids(processor, part)).tolist()):
                hits.setdefault(e.kind, []).append(ok)
    model.train()
    return {k: sum(v) / len(v) for k, v in sorted(hits.items())}


def learning_rate(step: int, steps: int, lr: float, decay_from: int | None = None) -> float:
    """200 warm-up steps, then constant; from ``decay_from`` on, linear to 0 at ``steps`` (the
    policy's refine stage did the same: a constant rate leaves the weights bouncing around a
    minimum). A function of the step only, so a resumed run follows the same schedule."""
    rate = lr * min(1.0, (step + 1) / 200)
    if decay_from is not None and step >= decay_from:
        rate *= max(0.0, (steps - step) / max(1, steps - decay_from))
    return rate


def train(
    workdir: str | Path,
    steps: int,
    *,
    batch: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    eval_every: int = 500,
    decay_from: int | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Train until ``steps`` (resuming from ``workdir/state.pt``); returns the state path."""
    import torch

    from cast_shapes.judge_model import build_judge

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    state_path = workdir / "state.pt"
    model, processor = build_judge(seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    step = 0
    if state_path.exists():
        state = torch.load(state_path, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        log(f"resumed {workdir} at step {step}")
    test = heldout_examples(100)
    model.train()
    t0, first = time.monotonic(), step
    while step < steps:
        examples = batch_for_step(seed, step, batch)
        for g in opt.param_groups:
            g["lr"] = learning_rate(step, steps, lr, decay_from)
        logits = model(**encode(processor, examples), logits_to_keep=1).logits[:, -1]
        loss = torch.nn.functional.cross_entropy(logits.float(), answer_ids(processor, examples))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0 or step == steps:
            rate = (time.monotonic() - t0) / (step - first)
            log(
                f"step {step}/{steps} loss {loss.item():.4f} "
                f"({rate:.2f} s/step, {(steps - step) * rate / 60:.0f} min left)"
            )
        if step % eval_every == 0 or step == steps:
            acc = accuracy(model, processor, test)
            log(f"step {step}: held-out accuracy " + "  ".join(f"{k} {v:.3f}" for k, v in acc.items()))
            tmp = state_path.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
            tmp.replace(state_path)
    return state_path


def export(workdir: str | Path, out: str | Path, seed: int = 0) -> Path:
    """Write the trained judge as a Qwen3-VL checkpoint directory (safetensors + processor)."""
    import torch

    from cast_shapes.judge_model import build_judge

    model, processor = build_judge(seed=seed)
    model.load_state_dict(torch.load(Path(workdir) / "state.pt", weights_only=True)["model"])
    out = Path(out)
    model.eval().save_pretrained(out)
    processor.save_pretrained(out)
    return out
