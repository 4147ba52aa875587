"""The ``nsq`` data source: what Spark asks for by name, handing each side its reader or writer.

Every object here is pickled between Spark's processes, so it holds only its options; each
reader and writer connects on the side that runs it.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from . import options as _options
from .rows import SCHEMA


class NSQDataSource(DataSource):
    """``spark.readStream.format("nsq")``, ``spark.read.format("nsq")``, ``df.write[Stream]...``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # What every use needs is checked when the DataFrame is defined; what only reading
        # needs (a channel), when the reader is made.
        _options.parse(options, reading=False)

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch import BatchReader

        return BatchReader(_options.parse(self.options, reading=True))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import StreamReader

        return StreamReader(_options.parse(self.options, reading=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import BatchWriter

        return BatchWriter(_options.parse(self.options, reading=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import StreamWriter

        return StreamWriter(_options.parse(self.options, reading=False), schema)
