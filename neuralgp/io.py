"""Saving and loading fitted models without the training data and without unpickling code.

A model file is a ``torch.save`` of plain containers (dicts, lists, str, numbers, tensors) read back
with ``torch.load(weights_only=True)``, which refuses arbitrary objects.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from neuralgp.errors import ModelFileError

FORMAT = "neuralgp-model"
FORMAT_VERSION = 4  # 2: DBK's training_gram_dtype became training_gram_precision; 3: ResNet depth counts residual blocks;
#                   4: learned noise / output scale are Positive modules, FM-GP width feature_dim, GPnnRegressor
_REGISTRY: dict[str, type] = {}


def register(cls):
    """Class decorator: make an estimator loadable by name."""
    _REGISTRY[cls.__name__] = cls
    return cls


def write_atomic(path: Path, write) -> Path:
    """Call ``write(tmp_path)`` on a temporary file beside ``path``, then rename it: never a partial file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def save_model(payload: dict, path) -> Path:
    """Write a model file atomically."""
    path = Path(path)
    if path.is_dir():
        raise ModelFileError(f"{path} is a directory; give a file name such as {path / 'model.pt'}")
    if not path.parent.exists():
        raise ModelFileError(f"folder {path.parent} does not exist; create it first")
    return write_atomic(path, lambda tmp: torch.save({"format": FORMAT, "format_version": FORMAT_VERSION,
                                                       **payload}, tmp))


def load(path):
    """Load a model saved with ``estimator.save(path)``; predictions are identical to the saved model's."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file {path} does not exist")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt or foreign files
        raise ModelFileError(f"{path} is not a readable neuralgp model file ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:200] if str(exc) else 'corrupt'})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ModelFileError(f"{path} is not a neuralgp model file (save models with estimator.save)")
    if payload.get("format_version") != FORMAT_VERSION:
        raise ModelFileError(f"{path} has format version {payload.get('format_version')}; "
                             f"this neuralgp reads version {FORMAT_VERSION}; re-fit and save the model with "
                             f"this version")
    cls = _REGISTRY.get(payload.get("class"))
    if cls is None:
        raise ModelFileError(f"{path} holds an unknown model class {payload.get('class')!r}")
    try:
        return cls._from_payload(payload)
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise ModelFileError(f"{path} is damaged or incomplete: {exc}") from None
