"""The installed `cast` on outputs it cannot write and inputs it could misread, in fresh
processes: a really full (and read-only) disk under `cast train` / `--resume` / `cast report`,
a 20,000-word prompt, and image files that the shapes oracle does not read exactly."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cast_core.testing.fakes import fake_run_args
from conftest import run_cast

LONG = " ".join(["blorp"] * 20000)


def one_clean_error(out: subprocess.CompletedProcess, code: int = 1) -> str:
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == code, (out.returncode, out.stderr[-2000:])
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, out.stderr[-2000:]
    return errors[0]


@pytest.mark.parametrize(
    "args",
    [
        ["sample", "--policy", "shapes", "-p", LONG, "-o", "{tmp}/x.png", "--steps", "2"],
        ["score", "{tmp}/img.png", "-p", LONG],
        ["train", "--steps", "1", "--out", "{tmp}/run", "--set", f'prompts=["{LONG}"]'],
    ],
    ids=["sample", "score", "train"],
)
def test_a_20000_word_prompt_is_cut_in_every_message(tmp_path, args):
    Image.new("RGB", (32, 32), "white").save(tmp_path / "img.png")
    out = run_cast(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    one_clean_error(out)
    assert len(out.stderr) < 2000, len(out.stderr)
    assert not (tmp_path / "x.png").exists()


def test_shapes_oracle_names_the_first_image_that_is_not_an_exact_render(tmp_path):
    prompt = "a red circle above two yellow triangles"
    assert run_cast("shapes", "render", prompt, "-o", str(tmp_path / "exact.png")).returncode == 0
    exact = Image.open(tmp_path / "exact.png")
    exact.save(tmp_path / "lossy.jpg", quality=30)
    exact.resize((64, 64)).save(tmp_path / "big.png")
    out = run_cast("score", *(str(tmp_path / n) for n in ("exact.png", "lossy.jpg", "big.png")), "-p", prompt)
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1, out.stderr  # one line a run, naming the first such file
    assert warnings[0].startswith(f"warning: {tmp_path / 'lossy.jpg'}: ") and "not shapes-world colours" in warnings[0]
    assert "exact on shapes-world renders" in warnings[0] and "can fall to 0" in warnings[0]
    alone = run_cast("score", str(tmp_path / "big.png"), "-p", prompt)
    assert "64x64 pixels, not the world's 32x32" in alone.stderr
    assert "warning" not in run_cast("score", str(tmp_path / "exact.png"), "-p", prompt).stderr


def test_shapes_oracle_says_nothing_about_an_exact_render_read_as_16_bit(tmp_path):
    from cast_core.commands.inputs import load_image
    from cast_shapes.oracle import ShapesOracleScorer

    assert run_cast("shapes", "render", "two blue squares", "-o", str(tmp_path / "r.png")).returncode == 0
    rgb = np.asarray(Image.open(tmp_path / "r.png")).astype(np.uint16) * 257
    Image.fromarray(rgb[..., 2]).save(tmp_path / "blue16.png")  # one channel, 16-bit: read as grey
    grey = load_image(tmp_path / "blue16.png")
    assert float(grey.max()) == 1.0 and float(grey.min()) < 0.95  # white background, darker squares
    oracle = ShapesOracleScorer()
    assert oracle.image_caveat(load_image(tmp_path / "r.png")) is None
    assert "not shapes-world colours" in oracle.image_caveat(grey)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs mounted at tmp_path/disk (root only), unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def leftovers(folder: Path) -> list[str]:
    """Files a failed write must not leave: temporaries and empty files."""
    return [
        str(p)
        for p in folder.rglob("*")
        if (p.is_file() and p.name != ".lock" and p.stat().st_size == 0) or ".tmp" in p.name
    ]


def test_a_full_then_read_only_disk_gives_one_line_and_the_run_resumes(tiny_disk):
    run = tiny_disk / "run"
    filler = tiny_disk / "filler"
    filler.write_bytes(b"\0" * (1024 * 1024 - 80 * 1024))  # about 80 KiB left: the first checkpoints fit
    train = fake_run_args(
        prompts=["a red circle", "a blue square"],
        group_size=4,
        num_steps=4,
        window_size=2,
        steps=12,
        checkpoint_every=1,
        sample_every=0,
        keep_checkpoints=12,
    )
    message = one_clean_error(run_cast("train", *train, "--out", str(run)))
    assert message.startswith("Error: cannot write ") and "no space left on device" in message, message
    assert f"cast train --resume {run}" in message or "the run can resume" in message, message
    assert leftovers(tiny_disk) == []
    filler.unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)
    for args in (["train", "--resume", str(run)], ["report", str(run)]):
        message = one_clean_error(run_cast(*args))
        assert "read-only file system" in message, message
    subprocess.run(["mount", "-o", "remount,rw", str(tiny_disk)], check=True)
    resumed = run_cast("train", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (run / "checkpoints" / "step-00012" / "state.json").is_file() and leftovers(tiny_disk) == []
