"""Where a Hugging Face export lands: the umask's mode, and through a symlink to an empty directory.

The exported model's content is tested against `transformers` in test_hf_t5; here a
tiny model of zeros is enough, so these run in seconds and without torch.
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from t2tcli import registry
from t2tcli.data.vocabulary.vocab import trained_model
from t2tcli.errors import UserError
from t2tcli.interop import hf_t5
from t2tcli.model.weight_names import Architecture, mesh_shapes

FILES = ["config.json", "model.safetensors", "spiece.model", "tokenizer_config.json"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(values, hparams, vocabulary bytes, vocabulary size) of a tiny zero model."""
    hp = registry.hparams("mtf_transformer_tiny")
    words = [" ".join("abcdefgh"[j % 8] * (1 + j % 3) for j in range(i, i + 6)) for i in range(400)]
    proto = trained_model(words, str(tmp_path_factory.mktemp("vocab") / "v.model"), vocab_size=40)
    shapes = mesh_shapes(Architecture.from_hparams(hp, 40))
    values = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    return values, hp, proto, 40


def _export(tiny, export_dir) -> None:
    values, hp, proto, size = tiny
    hf_t5.export(values, hp, proto, size, str(export_dir))


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["umask022", "umask027"])
def test_the_export_directory_takes_the_umask_s_mode(tiny, tmp_path, umask):
    previous = os.umask(umask)
    try:
        _export(tiny, tmp_path / "hf")
    finally:
        os.umask(previous)
    assert sorted(os.listdir(tmp_path / "hf")) == FILES
    assert stat.S_IMODE((tmp_path / "hf").stat().st_mode) == 0o777 & ~umask
    for name in FILES:
        assert stat.S_IMODE((tmp_path / "hf" / name).stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["hf"], "no staging directory left beside it"


def test_an_export_through_a_symlink_to_an_empty_directory_lands_in_it(tiny, tmp_path):
    target = tmp_path / "disk" / "models" / "t5"
    target.mkdir(parents=True)
    link = tmp_path / "hf"
    link.symlink_to(target)
    _export(tiny, link)
    assert link.is_symlink() and os.path.realpath(link) == str(target)
    assert sorted(os.listdir(link)) == FILES == sorted(os.listdir(target))
    assert sorted(os.listdir(target.parent)) == ["t5"], "no staging directory left beside it"


def test_a_symlink_to_nothing_is_one_line_before_anything_is_written(tiny, tmp_path):
    link = tmp_path / "hf"
    link.symlink_to(tmp_path / "missing")
    with pytest.raises(UserError, match=rf"--export_dir={link} is a symlink to {tmp_path / 'missing'}, which is not"):
        _export(tiny, link)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


class _Planting(dict):
    """Files to write that, once the first is written, plant a symlink under the next one's
    name in the staging directory: what a group member could do in a directory they can enter."""

    def __init__(self, files: dict[str, bytes], parent, victim) -> None:
        super().__init__(files)
        self.parent, self.victim, self.staging_modes = parent, victim, []

    def items(self):
        names = list(self)
        for i, (name, data) in enumerate(super().items()):
            if i == 1:
                (staging,) = [p for p in self.parent.iterdir() if p.name.startswith(".hf.")]
                self.staging_modes.append(stat.S_IMODE(staging.stat().st_mode))
                (staging / names[1]).symlink_to(self.victim)
            yield name, data


def test_the_staging_directory_is_private_and_a_symlink_planted_in_it_is_not_followed(tmp_path):
    from t2tcli.interop import export_files

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    files = _Planting({"config.json": b"{}", "model.safetensors": b"weights"}, out, victim)
    with pytest.raises(UserError, match="model.safetensors: something is there already"):
        export_files.write_whole(files, str(out / "hf"))
    assert files.staging_modes == [0o700]
    assert victim.read_text() == "precious"
    assert list(out.iterdir()) == [], "neither the export nor its staging directory is left"
