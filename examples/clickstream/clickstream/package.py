"""One zip for ``spark-submit --py-files``: this package, ``nsq_spark`` and their pure-Python
dependencies, taken from the interpreter that runs this (so the versions are the locked ones).

What is *not* in it, and must be installed in the Python the executors run
(``spark.pyspark.python``), because it is compiled code a zip cannot carry: ``pyspark``
itself (or the cluster's Spark Python), ``pyarrow``, ``pandas`` and ``numpy``, which Spark's
Python data sources need anyway. Everything listed in :data:`PURE` is plain Python that
Python imports from a zip as it is.
"""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

#: Top-level modules shipped: ours, then what nsq_client (trio, httpx) and nsq_common need.
PURE: tuple[str, ...] = (
    "clickstream", "nsq_spark", "nsq_client", "nsq_common",
    "attr", "attrs", "trio", "outcome", "sniffio", "sortedcontainers", "idna",
    "httpx", "httpcore", "h11", "anyio", "certifi", "typing_extensions",
)


def build(dest: str | Path, modules: tuple[str, ...] = PURE) -> Path:
    """Write the zip to ``dest`` (replacing it) and return its path."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in modules:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                raise ModuleNotFoundError(f"{name} is not installed here", name=name)
            origin = Path(spec.origin)
            if spec.submodule_search_locations is None:  # a single-file module
                zf.write(origin, origin.name)
                continue
            root = origin.parent
            for path in sorted(root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    zf.write(path, Path(name) / path.relative_to(root))
    return dest
