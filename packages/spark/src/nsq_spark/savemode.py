"""The sink's save modes: ``df.write.format("nsq")...save()`` with Spark's default, as Kafka's.

Kafka's sink allows ``Append`` and ``ErrorIfExists``, Spark's default (a topic has nothing to
overwrite or to find there already: both append), and refuses ``Overwrite`` and ``Ignore``.
A Python data source cannot say the same to Spark: its ``DataFrameWriter.save`` sends a V2
source that writes batches only ``Append`` and ``Overwrite`` (the ``overwrite`` flag of
``DataSource.writer``) and refuses any other mode with ``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``,
before any Python code of the source runs, so a save without ``.mode("append")`` failed.

:func:`install` (done by :func:`nsq_spark.register`) teaches PySpark's ``DataFrameWriter``
Kafka's rule for the ``nsq`` format only: a save whose mode is the default or ``error`` /
``errorifexists`` saves as ``append``. ``overwrite`` reaches the writer, which refuses it as
Kafka does (:class:`.errors.OptionError`); ``ignore`` is refused by Spark. Every other format
saves exactly as before. This is the classic (py4j) writer, the one a local session or
``spark-submit`` gives; a Spark Connect client still needs ``.mode("append")``.
"""

from __future__ import annotations

import functools
from typing import Any

from .errors import OptionError

#: The modes Spark reads as "fail if the data is there": Kafka's sink appends for them.
DEFAULT_MODES = frozenset({"error", "errorifexists", "default"})

_FORMAT = "_nsq_spark_format"  # attributes kept on each DataFrameWriter
_MODE = "_nsq_spark_mode"


def refuse_overwrite() -> OptionError:
    """Kafka's answer to ``mode("overwrite")``, in this source's words."""
    return OptionError("save mode Overwrite is not allowed for nsq: the allowed save modes "
                       "are Append and ErrorIfExists (the default), both of which publish")


def install() -> None:
    """Make PySpark's ``DataFrameWriter`` save ``format("nsq")`` in the default mode as an
    append (see the module docstring). Installing twice changes nothing."""
    from pyspark.sql.readwriter import DataFrameWriter

    if getattr(DataFrameWriter, "_nsq_spark_installed", False):
        return
    format_, mode, save = DataFrameWriter.format, DataFrameWriter.mode, DataFrameWriter.save

    @functools.wraps(format_)
    def format_kept(self: Any, source: str) -> Any:
        setattr(self, _FORMAT, source)
        return format_(self, source)

    @functools.wraps(mode)
    def mode_kept(self: Any, saveMode: str | None) -> Any:
        if saveMode is not None:  # PySpark's mode(None) leaves the mode as it was
            setattr(self, _MODE, saveMode)
        return mode(self, saveMode)

    @functools.wraps(save)
    def save_as_kafka(self: Any, path: str | None = None, format: str | None = None,
                      mode: str | None = None, *args: Any, **kwargs: Any) -> Any:
        source = format if format is not None else getattr(self, _FORMAT, None)
        chosen = mode if mode is not None else getattr(self, _MODE, None)
        if (isinstance(source, str) and source.lower() == "nsq"
                and (chosen is None or chosen.lower() in DEFAULT_MODES)):
            mode = "append"
        return save(self, path, format, mode, *args, **kwargs)

    DataFrameWriter.format = format_kept  # type: ignore[method-assign]
    DataFrameWriter.mode = mode_kept  # type: ignore[method-assign]
    DataFrameWriter.save = save_as_kafka  # type: ignore[method-assign]
    DataFrameWriter._nsq_spark_installed = True  # type: ignore[attr-defined]
