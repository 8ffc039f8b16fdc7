"""Run by torchrun in the multi-process tests: trains the fake policy and records, per rank,
what the tests compare (advantages by sample id, windows, who wrote files)."""

import json
import sys
from pathlib import Path

import torch

import cast_core.trainer as trainer_module
from cast_core.config import TrainConfig
from cast_core.run_dir import RunDirectory
from cast_core.trainer import Trainer


def main(run_dir: str, out: str, overrides: str) -> None:
    cfg = TrainConfig(policy="fake", scorer="left-brightness", decomposer="fake", projector="spatial",
                      prompts=["a red circle", "a blue square", "two green triangles"], group_size=4,
                      prompts_per_step=3, num_steps=6, window_start=0, window_size=3, lr=0.05, clip_range=0.2,
                      steps=3, sample_every=0, checkpoint_every=1)
    cfg.update(json.loads(overrides), "test")
    writes = []
    real_save = trainer_module.save_checkpoint
    trainer_module.save_checkpoint = lambda *a, **k: writes.append("checkpoint") or real_save(*a, **k)
    real_create = RunDirectory.create
    RunDirectory.create = lambda self, c: (writes.append("config") if self.writer else None) or real_create(self, c)
    trainer = Trainer(cfg, run_dir, log=lambda m: None)
    record = {"rank": trainer.dist.rank, "world": trainer.dist.world, "steps": []}
    real_update = trainer.update

    def spy(rollout, rows, ids, advantages, kept):
        record["steps"].append({"ids": [list(i) for i in ids], "advantages": advantages.tolist(),
                                "window": [rollout.window.start, rollout.window.size],
                                "images": rollout.images.tolist()})
        return real_update(rollout, rows, ids, advantages, kept)

    trainer.update = spy
    last = trainer.run()
    trainer.close()
    record["writes"] = writes
    record["last"] = {k: v for k, v in last.items() if isinstance(v, (int, float))}
    record["adapter"] = [p.detach().tolist() for p in trainer.params]
    Path(out, f"rank{record['rank']}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(*sys.argv[1:4])
