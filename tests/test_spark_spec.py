"""Spark source definitions without Spark: the one-line form, TOML files, JSON, their errors, and
the binding they make (no pyspark import needed to read a definition)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.spec import SourceFile, SourceSpec

CASES = [
    # (one line, the fields it gives)
    ("Orders=csv:/data/orders", {"stream": "Orders", "format": "csv", "path": "/data/orders"}),
    (
        "Orders=csv:/data/o?time=t&delay=2&maxFilesPerTrigger=4&header=false",
        {"time_column": "t", "watermark_delay": 2, "options": (("maxFilesPerTrigger", "4"), ("header", "false"))},
    ),
    ("Ticks=rate?rowsPerSecond=50", {"format": "rate", "path": None, "options": (("rowsPerSecond", "50"),)}),
    ("Ticks=RATE:?rowsPerSecond=5", {"format": "rate", "path": None}),
    ("L=socket:127.0.0.1:9999", {"format": "socket", "path": "127.0.0.1:9999"}),
    (
        "R=json:/r?sign=s&col.price=unit_price&col.qty=n",
        {"sign_column": "s", "columns": (("price", "unit_price"), ("qty", "n"))},
    ),
    (
        "S=parquet:/p?schema=t LONG, a INT&trigger=available-now",
        {"schema": "t LONG, a INT", "trigger": "available-now"},
    ),
    ("S=csv:/p?checkpoint=/ck/s&trigger=1 second", {"checkpoint": "/ck/s", "trigger": "1 second"}),
]


@pytest.mark.parametrize("line,fields", CASES)
def test_one_line_definitions(line, fields):
    spec = SourceSpec.parse(line)
    for k, v in fields.items():
        assert getattr(spec, k) == v, k
    assert SourceSpec.of(spec.to_dict()) == spec  # the JSON form reads back


ERRORS = [
    ("Orders", "expected STREAM=FORMAT"),
    ("=csv:/x", "expected STREAM=FORMAT"),
    ("Orders=", "expected STREAM=FORMAT"),
    ("1x=csv:/x", "is not a stream name"),
    ("A b=csv:/x", "is not a stream name"),
    ("S=csv:/x?delay=soon", "delay must be an integer"),
    ("S=csv:/x?delay=-1", "delay must be ≥ 0"),
]


@pytest.mark.parametrize("line,words", ERRORS)
def test_bad_lines_say_what_is_wrong(line, words):
    with pytest.raises(SparkSourceError, match=words) as e:
        SourceSpec.parse(line)
    assert e.value.code == "bad_source"


def test_json_form_errors():
    with pytest.raises(SparkSourceError, match="unknown key\\(s\\) colour"):
        SourceSpec.of({"stream": "S", "format": "csv", "colour": "red"})
    with pytest.raises(SparkSourceError, match="'format' \\(a string\\) is required"):
        SourceSpec.of({"stream": "S"})
    with pytest.raises(SparkSourceError, match="options: expected a table"):
        SourceSpec.of({"stream": "S", "format": "csv", "options": "x=1"})


def test_toml_file(tmp_path):
    f = tmp_path / "sources.toml"
    f.write_text(
        """
[[source]]
stream = "Orders"
format = "csv"
path = "/data/orders"
time_column = "t"
watermark_delay = 2
trigger = "available-now"
options = { maxFilesPerTrigger = 4, header = true }
columns = { qty = "quantity" }

[[source]]
stream = "Ticks"
format = "rate"
delay = 5
"""
    )
    orders, ticks = SourceFile.load(f).specs
    assert orders.options == (("maxFilesPerTrigger", "4"), ("header", "true"))  # Spark options are strings
    assert orders.columns == (("qty", "quantity"),) and ticks.watermark_delay == 5
    cfg = orders.config(tmp_path / "ck")
    assert cfg.available_now and cfg.trigger_interval is None and cfg.watermark_delay == 2
    assert cfg.checkpoint == str(tmp_path / "ck" / "orders") and cfg.columns == (("qty", "quantity"),)
    assert ticks.config("/ck").trigger_interval is None and not ticks.config("/ck").available_now


@pytest.mark.parametrize(
    "text,words",
    [
        ("[[source]]\nstream = 'S'\n", "source 1: 'format'"),
        ("[[source]]\nstream = 'S'\nformat = 'csv'\nwatermark = 3\n", "unknown key(s) watermark"),
        ("[source]\nstream = 'S'\n", "expected [[source]] tables"),
        ("[[source]\n", "sources.toml"),
        ("[other]\n", "expected [[source]] tables only (found other)"),
    ],
)
def test_bad_toml_files(tmp_path, text, words):
    f = tmp_path / "sources.toml"
    f.write_text(text)
    with pytest.raises(SparkSourceError) as e:
        SourceFile.load(f)
    assert words in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(SparkSourceError, match="cannot read source file"):
        SourceFile.load(tmp_path / "none.toml")


def test_reading_a_definition_does_not_import_pyspark():
    code = "import sys; from cqlstream.spark_bridge import SourceSpec; SourceSpec.parse('S=csv:/x'); "
    code += "import cqlstream.server.app; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
