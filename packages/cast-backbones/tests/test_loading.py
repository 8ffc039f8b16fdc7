"""The pieces of sharded loading that one process can check: reading rows of a stored tensor at
their byte offsets, finding a weight's file, drawing the adapter by name, and the errors. The
multi-process path (meta device, FSDP2, each process its own rows) is checked end to end against
the plain path in test_sharded_training.py."""

import json

import pytest
import torch
from safetensors.torch import save_file

from cast_backbones import loading
from cast_backbones.loading import init_lora_, read_header, read_rows_, weight_files
from conftest import tiny_policy


@pytest.fixture
def stored(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {
        "a.weight": torch.randn(7, 5, generator=gen),
        "b.bias": torch.randn(3, generator=gen).to(torch.bfloat16),
        "c.scale": torch.tensor(2.5),
    }
    path = tmp_path / "diffusion_pytorch_model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path, tensors


def _read(path, key, target, start, stop):
    header, data_start = read_header(path)
    with open(path, "rb", buffering=0) as f:
        read_rows_(target, f, header[key], data_start, start, stop)
    return target


@pytest.mark.parametrize("start,stop", [(0, 7), (2, 5), (6, 7), (4, 4)])
def test_rows_are_read_straight_into_a_tensor_of_the_same_dtype(stored, start, stop):
    path, tensors = stored
    got = _read(path, "a.weight", torch.full((stop - start, 5), float("nan")), start, stop)
    assert torch.equal(got, tensors["a.weight"][start:stop])


def test_rows_of_another_dtype_pass_through_a_chunked_buffer(stored, monkeypatch):
    path, tensors = stored
    monkeypatch.setattr(loading, "_CHUNK", 20)  # one row of 5 float32 per read
    got = _read(path, "a.weight", torch.zeros(4, 5, dtype=torch.bfloat16), 1, 5)
    assert torch.equal(got, tensors["a.weight"][1:5].to(torch.bfloat16))
    assert torch.equal(_read(path, "b.bias", torch.zeros(3), 0, 3), tensors["b.bias"].float())
    assert float(_read(path, "c.scale", torch.zeros(()), 0, 1)) == 2.5


def test_a_truncated_file_is_named(stored, tmp_path):
    path, _ = stored
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[:-40])
    header, data_start = read_header(cut)
    with open(cut, "rb", buffering=0) as f, pytest.raises(EOFError, match="truncated"):
        read_rows_(torch.zeros(7, 5), f, header["a.weight"], data_start, 0, 7)


def test_weight_files_follow_the_index_of_a_sharded_checkpoint(tmp_path, stored):
    path, _ = stored
    assert weight_files(path.parent) == {k: path for k in ("a.weight", "b.bias", "c.scale")}
    index = {"metadata": {}, "weight_map": {"x.weight": "part-1.safetensors", "y.weight": "part-2.safetensors"}}
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    assert weight_files(folder) == {
        "x.weight": folder / "part-1.safetensors",
        "y.weight": folder / "part-2.safetensors",
    }
    with pytest.raises(FileNotFoundError, match="load_sharded = false"):
        weight_files(tmp_path / "empty")


def _lora(policy):
    return {n: p.detach().clone() for n, p in policy.transformer.named_parameters() if "lora_" in n}


def test_the_adapter_is_drawn_by_name_from_the_seed():
    policy = tiny_policy("flux2", lora_rank=4)
    init_lora_(policy.transformer, 123)
    first = _lora(policy)
    assert all(float(v.abs().max()) == 0 for k, v in first.items() if "lora_B" in k)  # unchanged model
    a = torch.cat([v.flatten() for k, v in first.items() if "lora_A" in k])
    assert abs(float(a.std()) - 1 / 4) < 0.02  # peft's "gaussian" init: std 1/r
    torch.manual_seed(999)  # the global stream plays no part
    init_lora_(policy.transformer, 123)
    assert all(torch.equal(first[k], v) for k, v in _lora(policy).items())
    init_lora_(policy.transformer, 124)
    assert not torch.equal(
        first[next(k for k in first if "lora_A" in k)], _lora(policy)[next(k for k in first if "lora_A" in k)]
    )
    names = [k for k in first if "lora_A" in k]
    assert not torch.equal(first[names[0]].flatten()[:4], first[names[1]].flatten()[:4])  # each its own draw


def test_the_global_stream_moves_by_one_draw_whatever_peft_draws():
    """Both loading paths draw once from the global stream, so what the trainer draws after the
    policy is built does not depend on the path."""
    torch.manual_seed(5)
    tiny_policy("flux2", lora_rank=4)
    after_plain = torch.rand(3)
    torch.manual_seed(5)
    pipe = __import__("conftest").tiny_pipeline("flux2")  # the same draws the fixture makes
    loading.draw_lora_seed()
    assert torch.equal(torch.rand(3), after_plain)
    del pipe


def test_one_process_loads_the_plain_way(tmp_path):
    import warnings

    from conftest import POLICIES, tiny_pipeline

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tiny_pipeline("flux2").save_pretrained(tmp_path / "model")
        policy = POLICIES["flux2"](tmp_path / "model", load_sharded=True, image_size=(32, 32), lora_rank=4)
    assert policy.sharded_at_load is False  # no process group: nothing to shard over
