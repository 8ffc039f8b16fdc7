"""Run by torchrun in the multi-process tests: trains the fake policy and records, per rank,
what the tests compare (advantages by sample id, windows, who wrote files)."""

import json
import sys
from pathlib import Path

import torch

import cast_core.trainer as trainer_module
from cast_core.conditioning import PromptCache
from cast_core.config import TrainConfig
from cast_core.run_dir import RunDirectory
from cast_core.sharding import full_tensor
from cast_core.trainer import Trainer


class ProbeSelector:
    """Measures a window by sampling one prompt, as a real selector samples calibration prompts."""

    calls = 0

    def select(self, policy, prompts, num_steps):
        from cast_core.sampling import sample
        from cast_core.types import Window

        ProbeSelector.calls += 1
        sample(
            policy, prompts[:1], num_steps=num_steps, window=Window(0, 1), generator=torch.Generator().manual_seed(0)
        )
        return Window(1, 3)


def main(run_dir: str, out: str, overrides: str, resume: str = "") -> None:
    cfg = TrainConfig(
        policy="fake",
        scorer="left-brightness",
        decomposer="fake",
        projector="spatial",
        prompts=["a red circle", "a blue square", "two green triangles"],
        group_size=4,
        prompts_per_step=3,
        num_steps=6,
        window_start=0,
        window_size=3,
        lr=0.05,
        clip_range=0.2,
        steps=3,
        sample_every=0,
        checkpoint_every=1,
    )
    overrides = json.loads(overrides)
    probe = overrides.pop("probe_window", False)
    cfg.update(overrides, "test")
    writes = []
    real_save = trainer_module.save_checkpoint
    trainer_module.save_checkpoint = lambda *a, **k: (
        (writes.append("checkpoint") if k.get("writer", True) else None) or real_save(*a, **k)
    )
    encoded: list[str] = []  # the prompts this process encodes (prompt sharing: each once over all processes)
    real_encode_rows = PromptCache._encode_rows
    PromptCache._encode_rows = lambda self, new: encoded.extend(new) or real_encode_rows(self, new)
    real_create = RunDirectory.create
    RunDirectory.create = lambda self, c, *notes: (
        (writes.append("config") if self.writer else None) or real_create(self, c, *notes)
    )
    trainer = Trainer(cfg, run_dir, resume=resume == "resume", log=lambda m: None)
    if probe:  # a measured window: the selector runs the policy (collective forwards under FSDP2)
        trainer.selector = ProbeSelector()
    record = {"rank": trainer.dist.rank, "world": trainer.dist.world, "steps": [], "sharded": trainer.sharded}
    real_update = trainer.update

    def spy(rollout, scored):
        record["steps"].append(
            {
                "ids": [list(i) for i in scored.ids],
                "advantages": scored.advantages.tolist(),
                "window": [rollout.window.start, rollout.window.size],
                "images": rollout.images.tolist(),
            }
        )
        return real_update(rollout, scored)

    trainer.update = spy
    decomposed = []
    real_decompose = trainer.decomposer.decompose
    trainer.decomposer.decompose = lambda prompt: decomposed.append(prompt) or real_decompose(prompt)
    last = trainer.run()
    adapter = [full_tensor(p.detach()).tolist() for p in trainer.params]  # collective when sharded
    ema = [full_tensor(e).tolist() for e in trainer.ema] if trainer.ema is not None else None
    trainer.close()
    record["writes"] = writes
    record["last"] = {k: v for k, v in last.items() if isinstance(v, (int, float))}
    record["adapter"], record["ema"] = adapter, ema
    record["window_measurements"] = ProbeSelector.calls
    record["decomposed"] = decomposed
    record["encoded"] = encoded
    Path(out, f"rank{record['rank']}.json").write_text(json.dumps(record))
    from cast_core.distributed import leave_without_teardown

    leave_without_teardown()  # as `cast train` does: skip the gloo teardown that can abort


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(*sys.argv[1:5])
