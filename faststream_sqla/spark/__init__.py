"""Spark pipelines over the queue (extra `spark`): publish a DataFrame's rows as
messages, read the queue and the archive as DataFrames, and report on deliveries.

Importing this module imports pyspark; the rest of the package never does.
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401
except ImportError as e:  # pragma: no cover - the extra is missing
    msg = "faststream_sqla.spark needs pyspark: pip install 'faststream-sqla[spark]'"
    raise ImportError(msg) from e

from faststream_sqla.spark._errors import SparkJobError
from faststream_sqla.spark.publish import Constant, publish_dataframe, row_key
from faststream_sqla.spark.read import read_archive, read_queue
from faststream_sqla.spark.report import REPORT_INPUT, delivery_report
from faststream_sqla.spark.session import spark_session

__all__ = [
    "REPORT_INPUT",
    "Constant",
    "SparkJobError",
    "delivery_report",
    "publish_dataframe",
    "read_archive",
    "read_queue",
    "row_key",
    "spark_session",
]
