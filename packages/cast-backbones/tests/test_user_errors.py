"""A user's mistakes with a backbone policy, each refused in one line that names the
``policy_kwargs`` key, before anything heavy is loaded or allocated: a model path that holds no
pipeline, a CUDA device on a machine without one, a LoRA rank that cannot be built, text layers
the encoder lacks, a damaged adapter file; and ``--cpu``, which the policy class feeds."""

import time
import warnings

import click
import pytest
import torch
from click.testing import CliRunner
from conftest import POLICIES, tiny_pipeline, tiny_policy

from cast_backbones.checks import ModelPathError
from cast_backbones.lora import ADAPTER_FILE, AdapterFileError
from cast_core.errors import ConfigError


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny flux2 and qwen-image pipelines written by save_pretrained."""
    root = tmp_path_factory.mktemp("models")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("flux2", "qwen-image"):
            tiny_pipeline(name).save_pretrained(root / name)
    return root


@pytest.fixture
def no_cuda(monkeypatch):
    """This machine as one without a GPU, wherever the test runs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _never_loads(monkeypatch, name):
    """Loading the pipeline fails the test: the refusal must come first."""

    def load(*args, **kwargs):
        raise AssertionError("the pipeline was loaded before the mistake was refused")

    monkeypatch.setattr(POLICIES[name].pipeline_class(), "from_pretrained", load)


def _one_line(err):
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# -- model paths ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["flux2", "qwen-image"])
def test_a_path_that_holds_no_pipeline_is_named_with_what_it_must_hold(name, tmp_path, monkeypatch):
    _never_loads(monkeypatch, name)
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text("{}")
    (tmp_path / "file.safetensors").write_bytes(b"x")
    cases = {
        None: "policy_kwargs.path is not set",
        "": "policy_kwargs.path is empty",
        str(tmp_path / "empty"): "is empty",
        str(tmp_path / "other"): "has no model_index.json",
        str(tmp_path / "file.safetensors"): "is a file",
        str(tmp_path / "nowhere"): "policy_kwargs.path does not exist",
    }
    for path, says in cases.items():
        with pytest.raises(ModelPathError) as err:
            POLICIES[name](path)
        text = _one_line(err)
        assert says in text and "model_index.json" in text and POLICIES[name].pipeline_class_name in text
        assert path is None or path == "" or path in text
        assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, ConfigError)


def test_a_pipeline_directory_missing_a_component_is_named(saved, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(saved / "qwen-image", broken)
    shutil.rmtree(broken / "vae")
    with pytest.raises(ModelPathError) as err:
        POLICIES["qwen-image"](broken, image_size=(32, 32))
    assert f"policy_kwargs.path = {broken} holds an incomplete or damaged QwenImagePipeline" in _one_line(err)


def test_cast_sample_with_an_empty_model_directory_says_one_line(tmp_path):
    from cast_core.cli import cli

    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(
        cli,
        ["sample", "--policy", "flux2", "--set", f"policy_kwargs.path={tmp_path / 'empty'}", "-p", "a cat", "-o",
         str(tmp_path / "x.png")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: Flux2Policy: policy_kwargs.path = ")
    assert "is empty" in lines[0] and "model_index.json" in lines[0]
    assert not (tmp_path / "x.png").exists()


# -- devices -------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["device", "text_encoder_device"])
def test_a_cuda_device_without_a_gpu_names_its_key_and_the_cpu_switch(key, saved, no_cuda, monkeypatch):
    _never_loads(monkeypatch, "flux2")
    with pytest.raises(ConfigError) as err:
        POLICIES["flux2"](saved / "flux2", **{key: "cuda"})
    text = _one_line(err)
    assert f"'policy_kwargs.{key}' = 'cuda' needs a CUDA GPU" in text
    assert "--cpu" in text and f'--set policy_kwargs.{key}="cpu"' in text


def test_a_device_that_is_no_device_is_named(saved, monkeypatch):
    _never_loads(monkeypatch, "flux2")
    with pytest.raises(ConfigError, match="'policy_kwargs.text_encoder_device': 'gpu' is not a torch device"):
        POLICIES["flux2"](saved / "flux2", text_encoder_device="gpu")


# -- LoRA rank -----------------------------------------------------------------------------------
@pytest.mark.parametrize("rank", [0, -3, 2.5, True, "8"])
def test_a_lora_rank_below_one_or_not_whole_is_refused_before_loading(rank, saved, monkeypatch):
    _never_loads(monkeypatch, "flux2")
    with pytest.raises(ConfigError) as err:
        POLICIES["flux2"](saved / "flux2", lora_rank=rank)
    assert f"policy_kwargs.lora_rank = {rank!r}" in _one_line(err) and ">= 1" in str(err.value)


@pytest.mark.parametrize("name", ["flux2", "qwen-image"])
def test_a_huge_lora_rank_fails_fast_naming_the_largest_that_fits(name):
    pipeline = tiny_pipeline(name)
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        POLICIES[name].from_pipeline(pipeline, image_size=(32, 32), lora_rank=100000)
    assert time.perf_counter() - start < 5  # peft allocating this adapter took ~50 s
    text = _one_line(err)
    assert "policy_kwargs.lora_rank = 100000 is larger than this transformer can use" in text
    assert "use lora_rank <= " in text and "smallest adapted one" in text
    assert not any("lora_" in n for n, _ in pipeline.transformer.named_parameters())  # nothing was added


def test_lora_targets_that_match_no_layer_are_named():
    with pytest.raises(ConfigError, match=r"policy_kwargs.lora_targets = \['to_nothing'\] matches no Linear layer"):
        tiny_policy("qwen-image", lora_rank=4, lora_targets="to_nothing")


# -- text-encoder layers -------------------------------------------------------------------------
def test_out_layers_beyond_the_encoder_are_refused_before_loading(saved, monkeypatch):
    _never_loads(monkeypatch, "flux2")  # the count comes from text_encoder/config.json
    with pytest.raises(ConfigError) as err:
        POLICIES["flux2"](saved / "flux2", text_encoder_out_layers=[10, 31])
    text = _one_line(err)
    assert "policy_kwargs.text_encoder_out_layers = [10, 31] asks for hidden layer 31" in text
    assert "the text encoder has 30 layers" in text


def test_out_layers_beyond_an_in_memory_encoder_are_refused():
    with pytest.raises(ConfigError, match="asks for hidden layer 28, but the text encoder has 27 layers"):
        tiny_policy("flux2-klein", lora_rank=4, text_encoder_out_layers=[9, 28])
    with pytest.raises(ConfigError, match="text_encoder_out_layers = 'abc': give a list of layer numbers"):
        tiny_policy("flux2-klein", lora_rank=4, text_encoder_out_layers="abc")
    assert tiny_policy("flux2-klein", lora_rank=4, text_encoder_out_layers=[0, 27, -28]).out_layers == (0, 27, -28)


# -- damaged adapters ----------------------------------------------------------------------------
def test_a_truncated_adapter_names_the_file(tmp_path):
    from cast_core.commands.inputs import load_adapter_option

    tiny_policy("qwen-image", lora_rank=4).save_adapter(tmp_path / "adapter")
    weights = tmp_path / "adapter" / ADAPTER_FILE
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    policy = tiny_policy("qwen-image", lora_rank=4)
    with pytest.raises(AdapterFileError) as err:
        policy.load_adapter(tmp_path / "adapter")
    assert f"{weights} is truncated or damaged" in _one_line(err)
    with pytest.raises(click.BadParameter) as err:  # what cast sample / eval / compare print
        load_adapter_option(policy, str(tmp_path / "adapter"))
    assert str(weights) in err.value.format_message() and "\n" not in err.value.format_message()


# -- --cpu ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["flux2", "flux2-klein", "qwen-image"])
def test_cpu_sets_the_policy_devices_dtype_and_precision_over_the_recipe_and_set(recipe):
    from cast_core.config import build_config
    from cast_core.cpu_overrides import cpu_sets, policy_cpu_sets

    sets = cpu_sets(("policy_kwargs.path=/m",), recipe=recipe)
    cfg = build_config(recipe=recipe, sets=sets)
    assert cfg.policy_kwargs["text_encoder_device"] == "cpu" and cfg.policy_kwargs["device"] == "cpu"
    assert cfg.policy_kwargs["torch_dtype"] == "float32"
    assert (cfg.base_dtype, cfg.precision, cfg.cpu) == ("float32", "no", True)
    assert cfg.policy_kwargs["path"] == "/m" and cfg.policy_kwargs["lora_rank"] == 64  # the recipe's others stay
    gpu = ('policy_kwargs.device="cuda"', 'base_dtype="bfloat16"', 'precision="bf16"')
    cfg = build_config(recipe=recipe, sets=cpu_sets(gpu, recipe=recipe))  # --cpu wins over a GPU --set
    assert (cfg.policy_kwargs["device"], cfg.base_dtype, cfg.precision) == ("cpu", "float32", "no")
    assert build_config(recipe=recipe, sets=cpu_sets(('precision="no"',), recipe=recipe)).precision == "no"
    assert policy_cpu_sets(recipe, ("policy_kwargs.x=1",)) == (
        "policy_kwargs.x=1",
        'policy_kwargs.device="cpu"',
        'policy_kwargs.text_encoder_device="cpu"',
        'policy_kwargs.torch_dtype="float32"',
    )


def test_cast_sample_cpu_runs_a_gpu_command_line_on_the_cpu(saved, tmp_path, no_cuda):
    from cast_core.cli import cli

    gpu = ["sample", "--policy", "qwen-image", "--set", f"policy_kwargs.path={saved / 'qwen-image'}", "--set",
           "policy_kwargs.image_size=[32, 32]", "--set", "policy_kwargs.lora_rank=4", "--set",
           'policy_kwargs.text_encoder_device="cuda"', "--policy-opt", 'device="cuda"', "--set",
           'policy_kwargs.torch_dtype="bfloat16"', "-p", "a red cat", "--steps", "2"]  # fmt: skip
    refused = CliRunner().invoke(cli, [*gpu, "-o", str(tmp_path / "a.png")])
    assert refused.exit_code == 1 and "'policy_kwargs.device' = 'cuda' needs a CUDA GPU" in refused.output
    drawn = CliRunner().invoke(cli, [*gpu, "--cpu", "-o", str(tmp_path / "b.png")])
    assert drawn.exit_code == 0, drawn.output
    assert (tmp_path / "b.png").is_file() and not (tmp_path / "a.png").exists()
