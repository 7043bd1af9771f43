"""A checkpoint written by a release whose pickled classes differ is refused by its version, not
unpickled into objects that lack the new state."""

from __future__ import annotations

import json
import pickle

import pytest

from cqlstream.server import checkpoint as ckpt


def test_older_version_is_refused(tmp_path):
    path = tmp_path / ckpt.checkpoint_name(7)
    head = {"format": ckpt.FORMAT, "version": ckpt.VERSION - 1, "lsn": 7, "python": "3"}
    path.write_bytes(json.dumps(head).encode() + b"\n" + pickle.dumps({"x": 1}))
    with pytest.raises(ckpt.CheckpointError, match=f"version {ckpt.VERSION}"):
        ckpt.load(path, object())


def test_current_version_round_trips(tmp_path):
    path = ckpt.write(tmp_path, 3, {"x": [1, 2]}, object())
    assert ckpt.load(path, object()) == (3, {"x": [1, 2]})
