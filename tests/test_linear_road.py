"""The Linear Road workload: the generator is deterministic and gives the input it promises, and
STREAM's script (kept byte for byte) runs from the generated files through `--source-dir`."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.linear_road import gen

PACKAGE = Path(gen.__file__).resolve().parent
SCRIPT = PACKAGE / "linearroad.cql"
CQLSTREAM = str(Path(sys.executable).with_name("cqlstream"))
SMALL = gen.Params(xways=1, minutes=6, vehicles=600, seed=3)


def _digest(folder: Path) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in gen.FILES}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lr_tiny")
    gen.write(gen.PRESETS["tiny"], out)
    return out


def test_the_script_is_streams_own():
    """The packaged script is STREAM 0.6's examples/scripts/linearroad, unmodified."""
    text = SCRIPT.read_bytes()
    assert hashlib.sha256(text).hexdigest() == "36116c956814bcff1fb0927984e4353daab061d8d8cbbd420220da57e95ec2c0"
    assert b"source : /lfs/0/tmp/arvind/linearroad/xway" in text


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    gen.write(SMALL, tmp_path / "a")
    gen.write(SMALL, tmp_path / "b")
    gen.write(gen.Params(SMALL.xways, SMALL.minutes, SMALL.vehicles, seed=4), tmp_path / "c")
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a")["xway"] != _digest(tmp_path / "c")["xway"]


def test_generated_traffic_has_the_promised_shape():
    t = gen.traffic(gen.PRESETS["tiny"])
    c = t.columns
    assert np.all(np.diff(c["Scd"]) >= 0)
    rep = c["Type"] == 0
    vid, scd, lane = c["Vid"][rep], c["Scd"][rep], c["Lane"][rep]
    order = np.lexsort((scd, vid))
    vid, scd, lane = vid[order], scd[order], lane[order]
    pos, seg, speed = c["Pos"][rep][order], c["Seg"][rep][order], c["Speed"][rep][order]
    same = vid[1:] == vid[:-1]
    # a vehicle reports every 30 s, from its entry on lane 0 to its exit on lane 4
    assert np.all(np.diff(scd)[same] == 30)
    first = np.r_[True, ~same]
    last = np.r_[~same, True]
    assert np.all(lane[first] == 0) and np.all(lane[~first & ~last] >= 1) and np.all(lane[~first & ~last] <= 3)
    assert np.all((lane[last] == 4) | (scd[last] >= t.minutes * 60 - 30))
    assert (lane == 4).sum() > 50
    assert np.all(seg == pos // gen.SEG_FEET) and seg.min() >= 0 and seg.max() <= 99
    # accidents: at some instant two vehicles have reported the same position 4 times in a row
    stopped = same & (pos[1:] == pos[:-1]) & (speed[1:] == 0)
    runs = {}
    for i in np.flatnonzero(stopped[:-2] & stopped[1:-1] & stopped[2:]):
        runs.setdefault((int(c["XWay"][rep][order][i]), int(pos[i])), set()).add(int(vid[i]))
    assert sum(len(v) >= 2 for v in runs.values()) >= 1
    # requests: balance (Type 2) and daily expenditure (Type 3), Qids distinct
    asks = c["Type"] > 0
    assert {2, 3} <= set(np.unique(c["Type"][asks]).tolist())
    assert len(np.unique(c["Qid"][asks])) == asks.sum()
    # congestion: some segment-minutes with more than 50 distinct vehicles
    key = (scd // 60) * 1000 + c["Dir"][rep][order] * 100 + seg
    _, vol = np.unique(np.unique(np.stack([key, vid]), axis=1)[0], return_counts=True)
    assert vol.max() > 50


def test_the_minute_streams(tiny):
    assert (tiny / "minstr").read_text().splitlines()[:3] == ["i,i", "0,0", "60,1"]
    assert (tiny / "minendstr").read_text().splitlines()[:3] == ["i,i", "59,0", "119,1"]
    seg = (tiny / "minsegstr").read_text().splitlines()
    assert seg[:3] == ["i,i,i,i,i", "0,0,0,0,0", "0,0,0,0,1"]
    assert len(seg) - 1 == gen.PRESETS["tiny"].minutes * 2 * 100


def test_the_720k_preset_is_near_its_name():
    p = gen.PRESETS["720k"]
    total = gen.traffic(p).tuples + p.minutes * (2 + p.xways * 2 * gen.SEGMENTS)
    assert 0.9 * 720_000 < total < 1.1 * 720_000
    assert gen.parse_size("720k") == 720_000 and gen.parse_size("3M") == 3_000_000


def test_source_dir_reads_the_sources_from_a_folder(tmp_path):
    """`--source-dir` reads a script's sources (here absolute paths elsewhere) from one folder by
    file name; without it the script's own paths are looked for."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "s.dat").write_text("i,i\n1,5\n2,7\n")
    script = tmp_path / "run.cql"
    script.write_text(
        "table : register stream S (A integer);\nsource : /no/such/place/s.dat\n"
        "query : select A from S where A > 6;\ndest : out\n"
    )
    r = subprocess.run(
        [CQLSTREAM, "run", str(script), "--source-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "out").read_text() == "[2]:+:7\n"
    missing = subprocess.run([CQLSTREAM, "run", str(script)], capture_output=True, text=True)
    assert missing.returncode == 2
    assert "run.cql:2: source file '/no/such/place/s.dat' not found" in missing.stderr


PAPER_SCRIPT = PACKAGE / "linearroad_paper.cql"
DESTS = ("tollstr", "accnot", "accbal")


def test_streams_script_runs_unmodified_under_stream_compat(tiny, tmp_path):
    """Accepted with a warning for each of STREAM's four view-kind mismatches; every dest has output."""
    r = subprocess.run(
        [CQLSTREAM, "run", str(SCRIPT), "--source-dir", str(tiny), "--out-dir", str(tmp_path), "--stream-compat"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    warned = [line.split(": warning: ")[0] for line in r.stderr.splitlines() if ": warning: " in line]
    assert warned == [f"{SCRIPT}:{n}" for n in (119, 130, 142, 268)]
    for view in ("AffSegEast", "AffSegWest", "AffSeg", "SM5AvgRel"):
        assert f"vtable '{view}'" in r.stderr
    for dest in DESTS:
        assert (tmp_path / dest).read_text().count("\n") > 0, dest


def test_paper_mode_refuses_streams_script_at_the_stream_declared_over_a_relation(tiny, tmp_path):
    r = subprocess.run(
        [CQLSTREAM, "run", str(SCRIPT), "--source-dir", str(tiny), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert (
        f"{SCRIPT}:268: vtable 'SM5AvgRel' is declared a stream but its vquery (line 266) yields a relation" in r.stderr
    )
    assert "or register it as a relation" in r.stderr


def test_the_paper_script_differs_only_where_it_says(tmp_path):
    """Every line of the paper version that is not STREAM's is a `# paper:` comment or follows one."""
    ours = PAPER_SCRIPT.read_text().splitlines()
    theirs = set(SCRIPT.read_text().splitlines())
    changed = [i for i, line in enumerate(ours) if line not in theirs and not line.startswith("#")]
    assert len(changed) == 9
    for i in changed:
        block, j = [], i - 1
        while ours[j].startswith("#"):  # the comment lines right above the changed line
            block.append(ours[j])
            j -= 1
        assert any(c.startswith("# paper:") for c in block), ours[i]
