"""A user's mistakes with the judges' and decomposers' inputs, each one line naming the config key:
a judge or LLM path that holds no model, a CUDA device on a machine without one, and a GenEval 2
data file that is binary, missing, or not GenEval 2's format."""

import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from cast_core.cli import cli
from cast_core.errors import CastError, ConfigError, SceneGraphError
from cast_rewards.auto import AutoDecomposer
from cast_rewards.baselines import PickScoreScorer
from cast_rewards.geneval2 import GenEval2Decomposer, MissingDataError
from cast_rewards.llm import LLMDecomposer
from cast_rewards.model_dirs import ModelPathError
from cast_rewards.soft_tifa import SoftTifaScorer


def _one_line(err):
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def places(tmp_path):
    """An empty directory, a directory of something else, a file, and a path that is not there."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "model_index.json").write_text("{}")
    (tmp_path / "weights.bin").write_bytes(b"x")
    return {
        tmp_path / "empty": "the directory is empty",
        tmp_path / "other": "the directory has no config.json",
        tmp_path / "weights.bin": "it is a file",
        tmp_path / "nowhere": "no such directory",
    }


def _no_loading(monkeypatch):
    import transformers

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded before the path was refused")

    for name in ("Qwen3VLForConditionalGeneration", "CLIPModel", "AutoProcessor"):
        monkeypatch.setattr(getattr(transformers, name), "from_pretrained", load)


# -- model paths ---------------------------------------------------------------------------------
def test_a_soft_tifa_path_without_a_model_names_the_key_and_what_it_must_hold(places, monkeypatch):
    _no_loading(monkeypatch)
    for path, says in places.items():
        with pytest.raises(ModelPathError) as err:
            SoftTifaScorer(str(path), device="cpu")
        text = _one_line(err)
        assert f"soft-tifa: cannot load a Qwen3-VL judge from '{path}': {says} (scorer_kwargs.path)" in text
        assert "config.json" in text and "save_pretrained" in text
        assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, ConfigError)
    for path, says in ((None, "not set"), ("", "empty")):
        with pytest.raises(ModelPathError, match=f"soft-tifa: scorer_kwargs.path is {says}; give a Qwen3-VL"):
            SoftTifaScorer(path, device="cpu")


def test_a_pickscore_path_without_a_model_is_named(places, monkeypatch):
    _no_loading(monkeypatch)
    for path, says in places.items():
        with pytest.raises(ModelPathError, match=f"cannot load from '{path}': {says} \\(scorer_kwargs.path\\)"):
            PickScoreScorer(str(path), device="cpu")


def test_an_llm_path_is_named_by_the_decomposers_own_key(places):
    path = next(p for p, says in places.items() if says == "no such directory")
    with pytest.raises(ModelPathError, match=r"llm decomposer: .*\(decomposer_kwargs.path\)"):
        LLMDecomposer(str(path))
    with pytest.raises(ModelPathError, match=r"auto decomposer: .*\(decomposer_kwargs.llm_path\)"):
        AutoDecomposer(llm_path=str(path))


def test_cast_score_with_an_empty_judge_directory_says_one_line(tmp_path):
    (tmp_path / "judge").mkdir()
    Image.new("RGB", (32, 32)).save(tmp_path / "a.png")
    result = CliRunner().invoke(
        cli,
        ["score", "--scorer", "soft-tifa", "-p", "a red cat", str(tmp_path / "a.png"), "--set",
         f"scorer_kwargs.path={tmp_path / 'judge'}"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: soft-tifa: cannot load a Qwen3-VL judge from")
    assert "the directory is empty (scorer_kwargs.path)" in lines[0]


# -- devices -------------------------------------------------------------------------------------
def test_a_cuda_device_without_a_gpu_names_its_key(tmp_path, no_cuda, monkeypatch):
    _no_loading(monkeypatch)
    (tmp_path / "config.json").write_text("{}")  # a model directory: the device is what is wrong
    for build, key in (
        (lambda: SoftTifaScorer(str(tmp_path), device="cuda"), "scorer_kwargs.device"),
        (lambda: PickScoreScorer(str(tmp_path), device="cuda:0"), "scorer_kwargs.device"),
        (lambda: LLMDecomposer(str(tmp_path), device="cuda"), "decomposer_kwargs.device"),
    ):
        with pytest.raises(ConfigError) as err:
            build()
        assert f"config key '{key}' =" in _one_line(err) and "needs a CUDA GPU" in str(err.value)
        assert f'--set {key}="cpu"' in str(err.value) and "--cpu" not in str(err.value)


# -- GenEval 2 data ------------------------------------------------------------------------------
def test_a_binary_geneval2_file_is_one_line(tmp_path):
    data = tmp_path / "geneval2_data.jsonl"
    data.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(SceneGraphError) as err:
        GenEval2Decomposer(data)
    assert f"{data} is not a text file" in _one_line(err) and "one JSON object a line" in str(err.value)
    result = CliRunner().invoke(
        cli, ["decompose", "--decomposer", "geneval2", "--set", f"decomposer_kwargs.data={data}", "a red cat"]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] == [f"Error: {err.value}"]


@pytest.mark.parametrize(
    "line, says",
    [
        ("[1, 2]", "a GenEval 2 line is a JSON object, not list"),
        ('{"prompt": "x", "atom_count": 1, "vqa_list": [["q"]], "skills": ["object"]}', "[question, answer] pairs"),
        ('{"prompt": "x", "atom_count": "one", "vqa_list": [], "skills": []}', "atom_count a number"),
    ],
)
def test_lines_that_are_not_geneval2_records_are_located(tmp_path, line, says):
    data = tmp_path / "g.jsonl"
    data.write_text(line + "\n")
    with pytest.raises(SceneGraphError) as err:
        GenEval2Decomposer(data)
    assert _one_line(err).startswith(f"{data}:1: ") and says in str(err.value)


def test_missing_geneval2_data_is_a_cast_error(tmp_path):
    with pytest.raises(MissingDataError, match="is a directory; download geneval2_data.jsonl"):
        GenEval2Decomposer(tmp_path)
    with pytest.raises(CastError, match="needs data="):
        GenEval2Decomposer()
