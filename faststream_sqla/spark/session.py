"""A Spark session for this package's tools: the CLI, the benchmark, the examples."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_session(
    master: str = "local[*]", *, app_name: str = "faststream-sqla", shuffle_partitions: int = 4
) -> SparkSession:
    """The active session, or a new one on `master`: no web UI, no progress bars, few
    shuffle partitions (reports are small), and executors running this Python (so they
    import the same packages as the driver)."""
    from pyspark.sql import SparkSession

    # PySpark starts its Python workers with $PYSPARK_PYTHON (else "python3", which
    # may lack this package); a value the user set wins
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
