"""Model lookup and loading on the real splade-tiny checkpoint."""
from __future__ import annotations

import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch

from vtrepro.core.errors import VtreproError
from vtrepro.model.loading import MODELS_ENV, load_masked_lm, resolve_model


@pytest.fixture
def hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hub lookups fail at once (as HF_HUB_OFFLINE=1 does) instead of retrying for half a minute."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_resolve_model_maps_hub_ids_into_model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODELS_ENV, raising=False)
    (tmp_path / "naver" / "splade-v3").mkdir(parents=True)
    (tmp_path / "splade-tiny").mkdir()
    assert resolve_model("naver/splade-v3", tmp_path) == str(tmp_path / "naver" / "splade-v3")
    assert resolve_model("someone/splade-tiny", tmp_path) == str(tmp_path / "splade-tiny")
    assert resolve_model("someone/unknown", tmp_path) == "someone/unknown"
    assert resolve_model("naver/splade-v3") == "naver/splade-v3"
    assert resolve_model(tmp_path / "splade-tiny") == str(tmp_path / "splade-tiny")
    monkeypatch.setenv(MODELS_ENV, str(tmp_path))
    assert resolve_model("naver/splade-v3") == str(tmp_path / "naver" / "splade-v3")


def test_resolve_model_leaves_paths_alone(tmp_path: Path) -> None:
    (tmp_path / "splade-v3").mkdir()
    assert resolve_model("/no/such/splade-v3", tmp_path) == "/no/such/splade-v3"


def test_load_masked_lm(splade_tiny: Path) -> None:
    model, tokenizer = load_masked_lm(str(splade_tiny))
    assert not model.training
    assert model.dtype == torch.float32
    assert len(tokenizer) == model.config.vocab_size == 30522


def test_load_masked_lm_via_model_dir(splade_tiny: Path) -> None:
    model, _ = load_masked_lm("naver/splade-tiny", model_dir=splade_tiny.parent)
    assert model.config.vocab_size == 30522


@pytest.mark.parametrize("name", ["nobody/no-such-model", "/no/such/model-folder"])
def test_missing_model_is_one_line_error(name: str, hub_offline: None, tmp_path: Path) -> None:
    with pytest.raises(VtreproError) as raised:
        load_masked_lm(name, model_dir=tmp_path)
    message = str(raised.value)
    assert "\n" not in message
    assert name in message


def test_folder_without_model_files_is_error(tmp_path: Path, hub_offline: None) -> None:
    with pytest.raises(VtreproError, match="config.json"):
        load_masked_lm(str(tmp_path))


def test_tokenizer_much_smaller_than_vocabulary_is_error(splade_tiny: Path, tmp_path: Path, hub_offline: None) -> None:
    for name in ("config.json", "model.safetensors"):
        shutil.copy(splade_tiny / name, tmp_path / name)  # copies: a model folder's files lie inside it
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer"}')
    with pytest.raises(VtreproError, match="tokenizer has 5 tokens"):
        load_masked_lm(str(tmp_path))


def test_checkpoint_without_mlm_head_is_error(tmp_path: Path, hub_offline: None) -> None:
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    BertModel(config).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("".join(f"token{i}\n" for i in range(64)))
    with pytest.raises(VtreproError, match="lacks masked-LM weights"):
        load_masked_lm(str(tmp_path))


def test_packaged_minilm_resolves_offline() -> None:
    path = Path(resolve_model("sentence-transformers/all-MiniLM-L6-v2"))
    assert (path / "config.json").is_file()
