"""The ``nsq`` data source: what Spark asks for by name, handing each side its reader or writer.

Every object here is pickled between Spark's processes, so it holds only its options; each
reader and writer connects on the side that runs it.

Options are checked when the DataFrame is defined: :func:`.options.parse` when Spark makes
the source, :meth:`.options.Options.check_read` when it asks a read for its schema (it does
not for a write). A streaming reader is made only once the query runs, in a Python worker
where an exception from ``streamReader`` would reach the user as PySpark's own
``UnboundLocalError``; what it refuses is raised by its first call instead
(:class:`RefusedStreamReader`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from . import options as _options
from .errors import NSQSparkError
from .rows import SCHEMA


class NSQDataSource(DataSource):
    """``spark.readStream.format("nsq")``, ``spark.read.format("nsq")``, ``df.write[Stream]...``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = _options.parse(options)

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        self.parsed.check_read()  # Spark asks only a read for its schema
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self.parsed
        options.check_read()
        options.check_batch()
        if options.by_offset:
            from .offset_source import OffsetBatchReader

            return OffsetBatchReader(options)
        from .batch import BatchReader

        return BatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self.parsed
        try:
            options.check_read()
            options.check_stream()
        except NSQSparkError as exc:
            return RefusedStreamReader(exc)
        if options.by_offset:
            from .offset_source import OffsetStreamReader

            return OffsetStreamReader(options)
        from .stream import StreamReader

        return StreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import BatchWriter

        return BatchWriter(self.parsed, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import StreamWriter

        return StreamWriter(self.parsed, schema)


class RefusedStreamReader(DataSourceStreamReader):
    """A stream whose options were refused: its first call raises why."""

    def __init__(self, error: NSQSparkError) -> None:
        self.error = error

    def _refuse(self) -> NoReturn:
        raise self.error

    def initialOffset(self) -> dict[str, Any]:
        self._refuse()

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        self._refuse()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._refuse()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        self._refuse()
