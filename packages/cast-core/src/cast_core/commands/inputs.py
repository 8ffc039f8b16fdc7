"""The commands' shared options and input readers (images, ``--policy-opt``, adapters), with
errors that say where and how to fix. Library-level parsing lives with its owner: prompt files in
:mod:`cast_core.prompts`, seed lists in :mod:`cast_core.seeding`, ``table.KEY=VALUE`` options in
:mod:`cast_core.config`."""

from __future__ import annotations

from pathlib import Path

from cast_core.errors import InputError


#: the largest image ``cast score`` decodes (8192 x 8192): a few-KB file can claim billions of
#: pixels (a decompression bomb), and a judge resizes far below this anyway
MAX_IMAGE_PIXELS = 8192 * 8192


def seed_option(ctx, param, value: str) -> int:
    """The click callback of every ``--seed`` option: cast's one seed syntax and range
    (:func:`cast_core.seeding.parse_seed`), checked before anything loads. Here, not in
    ``cast_core.seeding``, because that module imports torch and command modules must not."""
    from cast_core.seeding import parse_seed

    return parse_seed(value, "--seed")


def load_image(path: str | Path):
    """An image file as a float tensor ``[3, H, W]`` in ``[0, 1]`` (alpha dropped, grey expanded).
    Missing, truncated, corrupt and oversized files are one-line input errors naming the file."""
    import warnings

    import torch
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    previous = Image.MAX_IMAGE_PIXELS
    try:
        Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                if img.width * img.height > MAX_IMAGE_PIXELS:
                    raise Image.DecompressionBombError("size")
                frames = getattr(img, "n_frames", 1)
                if frames > 1:
                    raise InputError(
                        f"{path} holds {frames} frames (an animation or a multi-page file); a judge scores one "
                        "picture: save the frame to score as its own file (e.g. PNG)"
                    )
                rgb = _rgb(img, path)
    except FileNotFoundError:
        raise InputError(f"image {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory; pass image files (e.g. {path}/*.png)") from None
    except UnidentifiedImageError:
        raise InputError(f"{path} is not an image Pillow can read (PNG, JPEG, WebP, ...)") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(
            f"{path} declares more than {MAX_IMAGE_PIXELS:,} pixels (8192 x 8192); refusing to decode it "
            "(a decompression bomb, or an image to downscale first)"
        ) from None
    except (OSError, SyntaxError, ValueError) as err:  # truncated or corrupt data (PIL raises all three)
        raise InputError(
            f"{path} is damaged and cannot be decoded "
            f"({str(err).splitlines()[0][:120] if str(err) else type(err).__name__}); "
            "re-export or re-download it"
        ) from None
    finally:
        Image.MAX_IMAGE_PIXELS = previous
    return torch.from_numpy(rgb).permute(2, 0, 1).contiguous()


def _rgb(img, path: Path):
    """``float32 [H, W, 3]`` in [0, 1]. Pillow's ``convert("RGB")`` clips 16-bit and 32-bit grey
    to 255 (white) and truncates float images to 0 or 1 (black), so those are scaled here: 16-bit
    by 65535, floats by the range they are in ([0, 1], 0..255 or 0..65535); other values cannot be
    read without guessing and are refused."""
    import numpy as np

    if not (img.mode.startswith("I") or img.mode == "F"):
        return np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    grey = np.asarray(img, dtype=np.float64)
    low, high = (float(grey.min()), float(grey.max())) if grey.size else (0.0, 0.0)
    if not (np.isfinite(low) and np.isfinite(high)):
        raise InputError(f"{path} holds NaN or infinite pixel values; re-export it with finite values")
    if img.mode == "F" and low >= 0 and high <= 1:
        scale = 1.0
    elif low >= 0 and high <= 255 and img.mode == "F":
        scale = 255.0
    elif low >= 0 and high <= 65535:
        scale = 65535.0
    else:
        raise InputError(
            f"{path} is a {img.mode} image with values from {low:g} to {high:g}; cast reads grey values in "
            "[0, 1] (floats), 0..255 or 0..65535: rescale it, or save it as an 8-bit PNG"
        )
    return np.repeat((grey / scale).astype(np.float32)[..., None], 3, axis=-1)


def policy_opt_option(fn):
    """``--policy-opt KEY=VALUE`` (repeatable): keyword arguments for the policy factory, the
    same ones a training config's ``policy_kwargs`` holds. Evaluating on another device, or an
    adapter trained with another LoRA rank, needs them to match the training run."""
    import click

    return click.option(
        "--policy-opt",
        "policy_opts",
        multiple=True,
        metavar="KEY=VALUE",
        help='Policy factory argument, e.g. device="cuda" or lora_rank=16 (TOML value; repeatable).',
    )(fn)


def policy_kwargs(policy_opts, sets=()) -> dict:
    """``("device=\\"cuda\\"", "lora_rank=16")`` → ``{"device": "cuda", "lora_rank": 16}``; ``sets``
    are ``--set policy_kwargs.KEY=VALUE`` items (the training config's spelling, so a command
    that trained a model samples it with the same words)."""
    from cast_core.config import dotted_kwargs, parse_set

    kwargs = parse_set(list(policy_opts), "--policy-opt", 'device="cuda"') if policy_opts else {}
    return dotted_kwargs(sets, "policy_kwargs", kwargs)


def split_sets(sets, tables: tuple[str, ...]) -> dict[str, list[str]]:
    """``--set`` items sorted by the dict option they address; an item for any other key is a
    usage error naming the ones this command takes."""
    import click

    out: dict[str, list[str]] = {t: [] for t in tables}
    for item in sets:
        table = item.split(".", 1)[0]
        if table not in out or "." not in item.split("=", 1)[0]:
            raise click.UsageError(f"--set {item}: this command takes {' or '.join(t + '.KEY=VALUE' for t in tables)}")
        out[table].append(item)
    return out


def load_adapter_option(policy, directory: str, option: str = "--adapter") -> None:
    """``policy.load_adapter(directory)`` with a bad directory reported as a usage error on
    ``option`` (exit 2, one line) instead of a traceback: the usual causes are a run directory
    given instead of its ``checkpoints/step-N/adapter``, or an adapter trained with other
    ``policy_kwargs`` (e.g. ``lora_rank``; pass them with ``--policy-opt``)."""
    import click
    from safetensors import SafetensorError

    try:
        policy.load_adapter(directory)
    except SafetensorError as err:  # a policy that reads the file itself (shapes): a cut or torn file
        raise click.BadParameter(
            f"{directory}: its adapter file is truncated or damaged ({str(err)[:160]}); copy it again, or use "
            "another checkpoint's adapter (RUN/checkpoints/step-N/adapter)",
            param_hint=option,
        ) from None
    except (FileNotFoundError, ValueError, RuntimeError, KeyError) as err:
        raise click.BadParameter(
            f"{err}. Pass an adapter directory such as RUN/checkpoints/step-N/adapter, with the training run's "
            "policy_kwargs as --policy-opt KEY=VALUE if it used non-default ones.",
            param_hint=option,
        ) from None
