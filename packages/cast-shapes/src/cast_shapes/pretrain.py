"""Pretraining the shapes policy from scratch: rectified flow on freshly rendered training scenes.

Long, so it is resumable: every ``checkpoint_every`` steps the full state (network, EMA, AdamW,
both RNGs, step) is written to ``workdir/state`` atomically (written to ``state.tmp``, then swapped
in), and running the same command again continues from it. The same seed and step count give the
same weights, whether or not the run was interrupted (up to thread-level float nondeterminism).

Data: each step draws ``batch`` random *training-split* scenes (never a held-out prompt), with atom
counts uniform over 2..8, lays them out at random and renders them — an endless, exactly labelled
stream. Objective: ``x_σ = (1−σ)·x0 + σ·ε``, target ``v = ε − x0``, MSE, σ ~ logit-normal(0, 1);
10 % of prompts are dropped to "" so classifier-free guidance works at sampling time.

A second, *refine* stage starts from exported weights (``init_weights``) instead of from noise: the
constant learning rate of stage 1 leaves the weights bouncing around a minimum, and a linear decay
to zero (``decay_steps``) settles them; ``small_scene_share`` puts more of the batch on 2–3-atom
scenes, which the uniform 2..8 stream under-serves (a seventh of the data for the prompts a user
tries first). Defaults leave stage 1's data stream and schedule untouched, so its runs reproduce.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from cast_shapes.checkpoint_io import save_net
from cast_shapes.model import ShapesModelConfig, ShapesNet, WordTokenizer, patchify


@dataclass(frozen=True)
class PretrainConfig:
    steps: int = 20_000
    batch: int = 64
    lr: float = 5e-4
    warmup: int = 200
    weight_decay: float = 0.01
    ema: float = 0.999
    cfg_dropout: float = 0.1
    seed: int = 0
    checkpoint_every: int = 250
    eval_every: int = 2_000
    log_every: int = 50
    eval_images: int = 2
    eval_steps: int = 20
    guidance: float = 2.0
    init_weights: str = ""
    decay_steps: int = 0
    small_scene_share: float = 0.0


def make_batch(rng: random.Random, batch: int, small_scene_share: float = 0.0) -> tuple[torch.Tensor, list[str]]:
    """Rendered images ``[B, 3, 32, 32]`` in [0, 1] and their prompts (training split only).

    With ``small_scene_share`` 0 no extra random number is drawn, so stage-1 streams stay identical.
    """
    from cast_shapes.grammar import prompt_for
    from cast_shapes.render import render_float
    from cast_shapes.suites import sample_scene_in_split
    from cast_shapes.world import sample_layout

    images, prompts = [], []
    for _ in range(batch):
        small = small_scene_share > 0 and rng.random() < small_scene_share
        scene = sample_scene_in_split(rng, "train", atoms=rng.randint(2, 3) if small else rng.randint(2, 8))
        images.append(torch.from_numpy(render_float(sample_layout(scene, rng))))
        prompts.append(prompt_for(scene))
    return torch.stack(images), prompts


class Pretrainer:
    def __init__(
        self,
        workdir: str | Path,
        cfg: PretrainConfig = PretrainConfig(),
        model_cfg: ShapesModelConfig = ShapesModelConfig(),
    ):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cfg, self.model_cfg = cfg, model_cfg
        torch.manual_seed(cfg.seed)
        self.net = ShapesNet(model_cfg)
        if cfg.init_weights:
            self.net.load_state_dict(self._initial_state(cfg.init_weights, model_cfg))
        self.ema = ShapesNet(model_cfg)
        self.ema.load_state_dict(self.net.state_dict())
        self.ema.requires_grad_(False)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.tokenizer = WordTokenizer(model_cfg.vocabulary, model_cfg.max_tokens)
        self.rng = random.Random(cfg.seed)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.step = 0
        self.started = time.time()
        self.elapsed_before = 0.0
        self._resume()

    @staticmethod
    def _initial_state(path: str, model_cfg: ShapesModelConfig) -> dict:
        from cast_shapes.checkpoint_io import load_net

        net, _ = load_net(path)
        if net.cfg.to_dict() != model_cfg.to_dict():
            raise SystemExit(
                f"{path}: its model config differs from this run's; refine only weights of the same architecture"
            )
        return net.state_dict()

    # -- state ------------------------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.workdir / "state"

    def _resume(self) -> None:
        src = self.state_dir if self.state_dir.is_dir() else self.workdir / "state.old"
        if not (src / "trainer.json").is_file():
            return
        meta = json.loads((src / "trainer.json").read_text())
        ignored = {"steps", "eval_every", "log_every"}  # cadence and length may change between sessions
        if {k: v for k, v in meta["config"].items() if k not in ignored} != {
            k: v for k, v in asdict(self.cfg).items() if k not in ignored
        }:
            changed = {k for k in meta["config"] if meta["config"][k] != asdict(self.cfg).get(k)} - ignored
            raise SystemExit(
                f"{src}: saved with different settings ({', '.join(sorted(changed))}); use another --workdir"
            )
        self.net.load_state_dict(load_file(str(src / "net.safetensors")))
        self.ema.load_state_dict(load_file(str(src / "ema.safetensors")))
        extra = torch.load(src / "optim.pt", weights_only=True)
        self.opt.load_state_dict(extra["optimizer"])
        self.gen.set_state(extra["torch_rng"])
        version, state, gauss = meta["python_rng"]
        self.rng.setstate((version, tuple(state), gauss))
        self.step = meta["step"]
        self.elapsed_before = meta["elapsed_s"]

    def save(self) -> None:
        tmp = self.workdir / "state.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, str(tmp / "net.safetensors"))
        save_file({k: v.contiguous() for k, v in self.ema.state_dict().items()}, str(tmp / "ema.safetensors"))
        torch.save({"optimizer": self.opt.state_dict(), "torch_rng": self.gen.get_state()}, tmp / "optim.pt")
        meta = {
            "step": self.step,
            "config": asdict(self.cfg),
            "model": self.model_cfg.to_dict(),
            "python_rng": self.rng.getstate(),
            "elapsed_s": self.elapsed(),
        }
        (tmp / "trainer.json").write_text(json.dumps(meta))
        old = self.workdir / "state.old"
        shutil.rmtree(old, ignore_errors=True)
        if self.state_dir.exists():
            os.replace(self.state_dir, old)
        os.replace(tmp, self.state_dir)
        shutil.rmtree(old, ignore_errors=True)

    def elapsed(self) -> float:
        return self.elapsed_before + time.time() - self.started

    # -- training ---------------------------------------------------------------------------
    def lr_at(self, step: int) -> float:
        """Linear warm-up, then constant; with ``decay_steps``, linear decay to 0 over the last ones."""
        cfg = self.cfg
        factor = min(1.0, (step + 1) / cfg.warmup)
        if cfg.decay_steps:
            factor = min(factor, max(0.0, (cfg.steps - step) / cfg.decay_steps))
        return cfg.lr * factor

    def train_step(self) -> float:
        cfg = self.cfg
        images, prompts = make_batch(self.rng, cfg.batch, cfg.small_scene_share)
        prompts = ["" if self.rng.random() < cfg.cfg_dropout else p for p in prompts]
        x0 = patchify(images, self.model_cfg.patch)
        noise = torch.randn(x0.shape, generator=self.gen)
        sigma = torch.sigmoid(torch.randn(cfg.batch, generator=self.gen))
        s = sigma[:, None, None]
        x = (1 - s) * x0 + s * noise
        v = self.net(x, sigma, self.net.text(self.tokenizer(prompts)))
        loss = (v - (noise - x0)).square().mean()
        for group in self.opt.param_groups:
            group["lr"] = self.lr_at(self.step)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
        self.opt.step()
        with torch.no_grad():
            for pe, pn in zip(self.ema.parameters(), self.net.parameters()):
                pe.lerp_(pn, 1.0 - cfg.ema)
        self.step += 1
        return float(loss.detach())

    def evaluate(self) -> dict:
        from cast_shapes.evaluation import evaluate_net

        return evaluate_net(
            self.ema,
            images_per_prompt=self.cfg.eval_images,
            num_steps=self.cfg.eval_steps,
            guidance=self.cfg.guidance,
            suites=("single", "heldout-hard"),
            limit=24,
        )

    def run(self, log=print) -> None:
        cfg = self.cfg
        losses: list[float] = []
        t_last, s_last = time.time(), self.step
        with open(self.workdir / "log.jsonl", "a") as logf:
            while self.step < cfg.steps:
                losses.append(self.train_step())
                if self.step % cfg.log_every == 0:
                    rate = (self.step - s_last) / max(time.time() - t_last, 1e-9)
                    t_last, s_last = time.time(), self.step
                    rec = {
                        "step": self.step,
                        "loss": sum(losses) / len(losses),
                        "lr": self.lr_at(self.step),
                        "steps_per_s": rate,
                        "elapsed_s": self.elapsed(),
                    }
                    losses.clear()
                    logf.write(json.dumps(rec) + "\n")
                    logf.flush()
                    log(
                        f"step {self.step}/{cfg.steps} loss {rec['loss']:.4f} {rate:.2f} it/s "
                        f"elapsed {rec['elapsed_s'] / 60:.1f} min"
                    )
                if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps:
                    self.save()
                if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                    ev = self.evaluate()
                    ev["step"] = self.step
                    with open(self.workdir / "eval.jsonl", "a") as f:
                        f.write(json.dumps(ev) + "\n")
                    log(
                        f"eval step {self.step}: "
                        + ", ".join(f"{k} {v:.3f}" for k, v in ev.items() if isinstance(v, float))
                    )

    def export(self, path: str | Path) -> None:
        extra = {}
        if self.cfg.init_weights:
            import hashlib

            extra["init_weights_sha256"] = hashlib.sha256(Path(self.cfg.init_weights).read_bytes()).hexdigest()
        save_net(
            self.ema,
            path,
            extra
            | {
                "pretrain_steps": self.step,
                "pretrain_seed": self.cfg.seed,
                "pretrain_wall_s": round(self.elapsed()),
                "pretrain_config": json.dumps({**asdict(self.cfg), "steps": self.step}),
            },
        )


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Pretrain the shapes policy (resumable).")
    p.add_argument("--workdir", default=str(Path.home() / ".cache" / "cast" / "shapes-pretrain"))
    p.add_argument("--steps", type=int, default=PretrainConfig.steps)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--export", help="write the EMA weights here when done")
    p.add_argument("--eval-every", type=int, default=PretrainConfig.eval_every)
    p.add_argument("--log-every", type=int, default=PretrainConfig.log_every)
    p.add_argument("--init-weights", default="", help="refine stage: start from these exported weights")
    p.add_argument("--lr", type=float, default=PretrainConfig.lr)
    p.add_argument("--decay-steps", type=int, default=0, help="decay the lr linearly to 0 over the last N steps")
    p.add_argument("--small-scene-share", type=float, default=0.0, help="share of 2-3-atom scenes in each batch")
    p.add_argument("--seed", type=int, default=PretrainConfig.seed)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if not 0.0 <= a.small_scene_share <= 1.0:
        p.error(f"--small-scene-share {a.small_scene_share}: must lie in [0, 1]")
    if a.init_weights and not Path(a.init_weights).is_file():
        p.error(f"--init-weights {a.init_weights}: no such file")
    trainer = Pretrainer(
        a.workdir,
        PretrainConfig(
            steps=a.steps,
            eval_every=a.eval_every,
            log_every=a.log_every,
            lr=a.lr,
            seed=a.seed,
            init_weights=str(Path(a.init_weights).resolve()) if a.init_weights else "",
            decay_steps=a.decay_steps,
            small_scene_share=a.small_scene_share,
        ),
    )
    print(f"workdir {a.workdir}: starting at step {trainer.step}", file=sys.stderr)
    trainer.run()
    if a.export:
        trainer.export(a.export)


if __name__ == "__main__":
    main()
