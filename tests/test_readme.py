"""README.md's code blocks are run, so the examples cannot go stale.

Every fenced block is classified, and a new block that fits no class fails the suite:
- ```python blocks run (cwd a temp folder); `print(...)  # → X` must print X, and a paragraph right
  after the block that starts "prints `X`" must be the block's whole output. A block listed in
  CONTINUES runs after the block before it, in its namespace. The client example runs against a
  real server on 127.0.0.1 (its URL is swapped in).
- ```bash blocks run in bash with `.venv/bin/` pointing at this interpreter's bin folder and /tmp/
  at a temp folder; the first plain block after one (prose between) is its expected stdout.
- plain blocks starting with `$ ` are transcripts: the command runs, its stdout+stderr must be the
  rest, and "exits N" in the paragraph before must be its exit code.
- EXCERPTS are quoted from a file of the repo: their lines appear there in order.
- SKIPPED lists the blocks that cannot run in a test, each with the reason.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
TIMEOUT = 60

# first line of the block -> why it is not run
SKIPPED = {
    "make demo": "installs the venv and serves the demo until Ctrl-C (tests/test_demo_server.py runs serve --demo)",
    ".venv/bin/cqlstream serve": "a server that runs until stopped (tests/server/ start real ones)",
    "curl -X POST localhost:8000/streams": "needs curl and a live server (tests/server/ push every format)",
    "curl -N": "needs curl and a live server (tests/server/ read every result format)",
    '{"type": "https://cqlstream.dev/problems': "an example problem document (tests/server/test_errors.py)",
    "mkdir -p orders": "a server and a follower that run until stopped, and Spark; tests/spark/test_server_sources.py "
    "runs the same commands",
    "docker build": "needs a Docker daemon (tests/test_docker_files.py checks the files; scripts/docker_smoke.sh runs them)",
}
# first line of the block -> the repo file it quotes
EXCERPTS = {
    "table : register stream Orders": "demo/shop.cql",
    "i,i,i,f": "demo/data/orders.dat",
}
# first line of a python block -> it continues the python block before it
CONTINUES = {"late = d.register_query(": "the Dsms example above"}
# first line of a python block -> it talks to a server at this URL, replaced by a real one
NEEDS_SERVER = {"from cqlstream.client import Client": "http://127.0.0.1:8000"}


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int  # of the opening fence
    before: str  # prose between the previous block and this one
    after: str  # prose between this block and the next

    @property
    def first(self) -> str:
        return self.text.splitlines()[0] if self.text else ""

    @property
    def id(self) -> str:
        return f"L{self.line}-{self.lang or 'text'}"


def read_blocks(text: str) -> list[Block]:
    raw: list[tuple[str, str, int, str]] = []
    prose: list[str] = []
    lines = iter(enumerate(text.splitlines(), 1))
    for no, line in lines:
        if not line.startswith("```"):
            prose.append(line)
            continue
        body = []
        for _, inner in lines:
            if inner.startswith("```"):
                break
            body.append(inner)
        raw.append((line[3:].strip(), "\n".join(body), no, "\n".join(prose)))
        prose = []
    afters = [r[3] for r in raw[1:]] + ["\n".join(prose)]
    return [Block(lang, body, no, before, after) for (lang, body, no, before), after in zip(raw, afters)]


BLOCKS = read_blocks(README.read_text())


def _key(block: Block, table: dict[str, str]) -> str | None:
    return next((k for k in table if block.first.startswith(k)), None)


def _outputs() -> dict[int, Block]:
    """Each bash block that runs -> the plain block that shows its output, if any."""
    out = {}
    for i, b in enumerate(BLOCKS):
        if b.lang == "bash" and _key(b, SKIPPED) is None and i + 1 < len(BLOCKS):
            nxt = BLOCKS[i + 1]
            if nxt.lang == "" and not nxt.first.startswith("$ ") and _key(nxt, EXCERPTS) is None:
                out[i] = nxt
    return out


OUTPUTS = _outputs()
SHOWN = {b.line for b in OUTPUTS.values()}


def kind(block: Block) -> str:
    if _key(block, SKIPPED) is not None:
        return "skipped"
    if block.line in SHOWN:
        return "shown output"
    if _key(block, EXCERPTS) is not None:
        return "excerpt"
    if block.lang == "python":
        return "python"
    if block.lang == "bash":
        return "bash"
    if block.lang == "" and block.first.startswith("$ "):
        return "transcript"
    return "unclassified"


def test_every_block_is_classified() -> None:
    assert len(BLOCKS) >= 10, "README.md fences not found"
    wrong = [f"{b.id}: {b.first!r}" for b in BLOCKS if kind(b) == "unclassified"]
    assert not wrong, f"README blocks that no rule runs or skips (add them to a table here): {wrong}"


def test_tables_name_existing_blocks() -> None:
    for table in (SKIPPED, EXCERPTS, CONTINUES, NEEDS_SERVER):
        for k in table:
            assert any(b.first.startswith(k) for b in BLOCKS), f"no README block starts with {k!r}"


def _of(wanted: str) -> list[Block]:
    return [b for b in BLOCKS if kind(b) == wanted]


# ----------------------------------------------------------------------------- python


def _expect_prints(source: str) -> tuple[ast.Module, dict[int, str]]:
    """`print(...)  # → X` becomes a call that checks the printed text is X; returns the tree and the Xs."""
    comments = {
        tok.start[0]: tok.string[1:].strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    expected: dict[int, str] = {}

    class Swap(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            note = comments.get(node.end_lineno or 0, "")
            if isinstance(node.func, ast.Name) and node.func.id == "print" and note.startswith("→"):
                expected[node.lineno] = note[1:].strip()
                node.func = ast.Name("__print_expect__", ast.Load())
                node.args.insert(0, ast.Constant(node.lineno))
            return self.generic_visit(node)

    tree = ast.fix_missing_locations(Swap().visit(ast.parse(source)))
    return tree, expected


def run_python(block: Block, namespace: dict) -> str:
    """Run one block in `namespace`; returns what it printed. Checks its `# →` comments."""
    tree, expected = _expect_prints(block.text)
    seen: dict[int, list[str]] = {}

    def print_expect(line: int, *args: object, **kw: object) -> None:
        buf = io.StringIO()
        print(*args, **kw, file=buf)  # type: ignore[call-overload]
        seen.setdefault(line, []).append(buf.getvalue().rstrip("\n"))
        print(*args, **kw)  # type: ignore[call-overload]

    namespace["__print_expect__"] = print_expect
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tree, f"README.md:{block.line}", "exec"), namespace)
    for line, want in expected.items():
        got = seen.get(line)
        assert got, f"README.md:{block.line + line}: the print never ran"
        assert all(g == want for g in got), f"README.md:{block.line + line}: printed {got}, README says {want!r}"
    return out.getvalue()


def _chain(block: Block) -> list[Block]:
    """The block and the python blocks it continues, first to last."""
    pys = [b for b in BLOCKS if b.lang == "python"]
    i = pys.index(block)
    chain = [block]
    while _key(chain[0], CONTINUES) is not None:
        i -= 1
        assert i >= 0, f"{block.id} continues nothing"
        chain.insert(0, pys[i])
    return chain


@pytest.fixture
def server_url() -> Iterator[str]:
    from tests.server.conftest import ServerThread

    server = ServerThread().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.mark.parametrize("block", _of("python"), ids=lambda b: b.id)
def test_python_block(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for b in _chain(block):
        url = NEEDS_SERVER.get(_key(b, NEEDS_SERVER) or "")
        if url is not None:
            b = Block(b.lang, b.text.replace(url, request.getfixturevalue("server_url")), b.line, b.before, b.after)
        printed = run_python(b, namespace)
    said = re.match(r"prints `([^`]*)`", block.after.strip())
    if said:
        assert printed.strip() == said.group(1)


# ----------------------------------------------------------------------------- shell


def _shell(command: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run README shell text from a folder that sees the repo's files, with .venv/bin and /tmp redirected."""
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and not (tmp_path / entry.name).exists():
            (tmp_path / entry.name).symlink_to(entry)
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    # /tmp/ first and only where the README wrote it: the checkout itself may live under /tmp
    command = re.sub(r"(?<![\w./-])/tmp/", lambda _: f"{scratch}/", command)
    command = re.sub(r"(?<![\w./-])\.venv/bin/", lambda _: f"{BIN}/", command)
    command = re.sub(r"^cqlstream ", f"{BIN}/cqlstream ", command, flags=re.M)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _same(got: str, shown: str) -> bool:
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip("\n").splitlines()]

    return norm(got) == norm(shown)


@pytest.mark.parametrize("block", _of("bash"), ids=lambda b: b.id)
def test_bash_block(block: Block, tmp_path: Path) -> None:
    done = _shell(block.text, tmp_path)
    assert done.returncode == 0, done.stderr
    shown = OUTPUTS.get(BLOCKS.index(block))
    if shown is not None:
        assert _same(done.stdout, shown.text), f"README.md:{shown.line} shows:\n{shown.text}\ngot:\n{done.stdout}"


@pytest.mark.parametrize("block", _of("transcript"), ids=lambda b: b.id)
def test_transcript(block: Block, tmp_path: Path) -> None:
    command, *shown = block.text.splitlines()
    done = _shell(command[2:], tmp_path)
    assert _same(done.stdout + done.stderr, "\n".join(shown)), done.stdout + done.stderr
    last_line = (block.before.strip().splitlines() or [""])[-1]
    code = re.search(r"exits (\d+)", last_line)
    assert done.returncode == (int(code.group(1)) if code else 0)


@pytest.mark.parametrize("block", _of("excerpt"), ids=lambda b: b.id)
def test_excerpt(block: Block) -> None:
    source = (ROOT / EXCERPTS[_key(block, EXCERPTS) or ""]).read_text().splitlines()
    rest = iter(line.strip() for line in source)
    missing = [line for line in block.text.splitlines() if line.strip() not in rest]
    assert not missing, f"README.md:{block.line}: not in {EXCERPTS[_key(block, EXCERPTS) or '']} (in order): {missing}"
