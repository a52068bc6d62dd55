"""Test-only: make SGLang 0.5.23's config modules importable on a CPU-only machine (the nox session ``sglang``).

PyPI's torchvision wheels are CUDA builds; next to torch 2.13.0+cpu their
``_C.so`` does not load (``libtorch_cuda.so`` missing) and ``import torchvision``
raises "operator torchvision::nms does not exist". SGLang's config resolution
(``publish``, which ``create_grammar_backend`` needs) imports ``sglang.srt.configs``,
whose ``nano_nemotron_vl`` imports ``multimodal/internvl_utils``, which does
``import torchvision.transforms`` at module level (nothing on the grammar path
calls it). So the session does not install torchvision, and :func:`install`
puts an import-only stand-in into ``sys.modules``, after letting transformers
decide (and cache: ``is_torchvision_available`` is ``lru_cache``d) that there is
none. A server never needs this: where SGLang's CUDA wheels are installed,
torchvision imports.
"""

from __future__ import annotations

import enum
import importlib.util
import sys
import types


def _unavailable(*args: object, **kwargs: object) -> None:
    raise RuntimeError("torchvision stand-in (tests/sglang_shims.py): image transforms are not available")


def install() -> bool:
    """Install the stand-in unless a working torchvision imports; True when installed."""
    if "torchvision" in sys.modules:
        return False
    if importlib.util.find_spec("torchvision") is not None:
        try:
            import torchvision  # noqa: F401

            return False
        except Exception:  # noqa: BLE001 - a CUDA build next to CPU torch
            for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
                del sys.modules[name]
    from transformers.utils import import_utils

    import_utils.is_torchvision_available.cache_clear()
    if import_utils.is_torchvision_available():  # a broken torchvision on the path: transformers would import it
        raise RuntimeError("a torchvision that does not import is installed: uninstall it (pip uninstall torchvision)")

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        NEAREST_EXACT = "nearest-exact"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"
        BOX = "box"
        HAMMING = "hamming"
        LANCZOS = "lanczos"

    tv = types.ModuleType("torchvision")
    tv.__path__ = []  # a package, so "import torchvision.transforms" resolves from sys.modules
    tr = types.ModuleType("torchvision.transforms")
    tr.__path__ = []
    fn = types.ModuleType("torchvision.transforms.functional")
    tr.InterpolationMode = fn.InterpolationMode = InterpolationMode  # type: ignore[attr-defined]
    for name in ("Compose", "Lambda", "Resize", "ToTensor", "Normalize", "CenterCrop"):
        setattr(tr, name, _unavailable)
    for name in ("pil_to_tensor", "to_tensor", "resize", "normalize", "center_crop", "crop", "pad"):
        setattr(fn, name, _unavailable)
    tr.functional = fn  # type: ignore[attr-defined]
    tv.transforms = tr  # type: ignore[attr-defined]
    sys.modules.update({"torchvision": tv, "torchvision.transforms": tr, "torchvision.transforms.functional": fn})
    return True
