"""``scripts/gpu_queue.py``: chunks load strictly, pending follows the runtime, staging fits the carry limit."""

import argparse
import ast
import importlib
import importlib.util
import json
import math
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_queue.py"
spec = importlib.util.spec_from_file_location("gpu_queue", SCRIPT)
queue = importlib.util.module_from_spec(spec)
sys.modules["gpu_queue"] = queue  # dataclasses resolve their module by name
spec.loader.exec_module(queue)


def _chunk(id="c", evidence="runtime", **kw):
    return queue.Chunk(id=id, title=id, command="true", minutes=kw.pop("minutes", 1), evidence=evidence, **kw)


def test_the_committed_queue_loads_and_every_chunk_fits_one_call():
    chunks = queue.load()
    assert chunks and all(c.minutes <= 8 for c in chunks)
    assert len({c.id for c in chunks}) == len(chunks)


@pytest.mark.parametrize("entry, message", [
    ('minutes = 9', "over the 8"),
    ('minutes = 1\nneeds = ["tpu"]', "unknown"),
    ('minutes = 1\nevidence = "maybe"', "evidence"),
    ('minutes = 1\nwhen = "now"', "unknown keys"),
    ('minutes = 1\nevidence = "stock"\nbare = true\nneeds = ["fa3"]', "a bare chunk needs nothing staged"),
    ('minutes = 1\nbare = true', "a bare chunk needs nothing staged"),  # runtime evidence needs the runtime
])
def test_a_malformed_chunk_is_refused_by_name(tmp_path, entry, message):
    path = tmp_path / "q.toml"
    path.write_text(f'[[chunk]]\nid = "x"\ntitle = "t"\ncommand = "true"\n{entry}\n')
    with pytest.raises(ValueError, match=message):
        queue.load(path)


def test_a_runtime_chunk_goes_stale_when_the_runtime_changes_and_a_stock_one_does_not():
    done = {"rc": 0, "runtime": "old"}
    assert queue.verdict(_chunk(), done, "old") == "current"
    assert queue.verdict(_chunk(), done, "new") == "stale"
    assert queue.verdict(_chunk(evidence="stock"), done, "new") == "current"
    assert queue.verdict(_chunk(), {"rc": 124, "timed_out": True, "runtime": "new"}, "new") == "pending"
    assert queue.verdict(_chunk(), None, "new") == "pending"


def test_pending_keeps_queue_order_and_says_why():
    chunks = [_chunk("a"), _chunk("b"), _chunk("c"), _chunk("d", evidence="stock")]
    records = {"a": {"rc": 0, "runtime": "r1"}, "b": None, "c": {"rc": 124, "timed_out": True, "runtime": "r2"},
               "d": {"rc": 0, "runtime": "r0"}}
    out = queue.pending(chunks, records, "r2")
    assert [c.id for c, _ in out] == ["a", "b", "c"]
    assert "stale" in out[0][1] and out[1][1] == "never ran" and "cut" in out[2][1]


def test_plan_calls_uses_the_fewest_calls_and_splits_only_what_does_not_fit(tmp_path):
    sizes = [45, 44, 30, 12, 12, 3]
    files = [(tmp_path / f"f{i}", "", s) for i, s in enumerate(sizes)]
    calls = queue.plan_calls(files, capacity=50)
    assert len(calls) == math.ceil(sum(sizes) / 50)
    assert all(sum(p.size for p in call) <= 50 for call in calls)
    carried = {}
    for call in calls:
        for p in call:
            carried.setdefault(p.source.name, []).append(p)
    assert {k: sum(p.size for p in v) for k, v in carried.items()} == {f"f{i}": s for i, s in enumerate(sizes)}
    split = [k for k, v in carried.items() if len(v) > 1]
    assert all(p.index is not None for k in split for p in carried[k])
    assert all(p.index is None for k, v in carried.items() if k not in split for p in v)


def test_plan_calls_never_splits_the_bin_folder(tmp_path):
    files = [(tmp_path / "a", "", 40), (tmp_path / "b", "", 40), (tmp_path / "bin", "bin", 20)]
    calls = queue.plan_calls(files, capacity=50)
    bins = [p for call in calls for p in call if p.dest == "bin"]
    assert len(bins) == 1 and bins[0].size == 20 and bins[0].index is None
    assert all(sum(p.size for p in call) <= 50 for call in calls)


def test_pieces_join_back_to_the_same_bytes(tmp_path):
    data = bytes(range(256)) * 1000
    src = tmp_path / "w.whl"
    src.write_bytes(data)
    stage = tmp_path / "stage"
    stage.mkdir()
    (_, _, size), = [(src, "", len(data))]
    for call in queue.plan_calls([(src, "", size), (tmp_path / "other", "", 90_000)], capacity=100_000):
        for p in call:
            if p.source == src:
                (stage / p.name).write_bytes(data[p.offset:p.offset + p.size])
    assert queue.join_pieces(stage) == ["w.whl"]
    assert (stage / "w.whl").read_bytes() == data and not list(stage.glob("*.piece*"))


def test_the_page_lists_every_chunk_with_its_state():
    chunks = [_chunk("a"), _chunk("b"), _chunk("c")]
    records = {"a": {"rc": 0, "runtime": "r", "commit": "abcdef123", "gpu": "NVIDIA H200, 1", "wall_s": 300},
               "b": {"rc": 0, "runtime": "old", "commit": "0123456", "gpu": "NVIDIA H100", "wall_s": 60}, "c": None}
    text = queue.page(chunks, records, "r")
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split(" | ")[2] for r in rows] == ["current", "stale", "pending"]
    assert "abcdef1" in rows[0] and "5.0 min" in rows[0] and "est." in rows[2]


def test_stage_writes_calls_that_fit_and_the_last_installs(tmp_path, monkeypatch):
    monkeypatch.setattr(queue, "ROOT", tmp_path)
    monkeypatch.setattr(queue, "tree_bytes", lambda: 1000)
    monkeypatch.setattr(queue, "CALL_BYTES", 11_000)
    monkeypatch.setattr(queue, "BLOCK", 1)  # byte-exact packing here; blocks have their own test
    gpu = tmp_path / ".gpu"
    for folder, name, size in (("part1", "a.whl", 9000), ("part2", "b.whl", 7000), ("fa3/part1", "flash_ops.zst.00", 6000),
                               ("smollm2", "m.whl", 4000), ("bin", "install.sh", 100)):
        (gpu / folder).mkdir(parents=True, exist_ok=True)
        (gpu / folder / name).write_bytes(bytes(size))
    calls = queue.stage(gpu, fa3=True, smollm2=True)
    sizes = [sum(f.stat().st_size for f in (tmp_path / c["carry"][0]).rglob("*") if f.is_file()) for c in calls]
    assert len(calls) == math.ceil((9000 + 7000 + 6000 + 4000 + 100) / 10_000) and max(sizes) <= 10_000
    assert all(c["command"].startswith("mkdir -p /tmp/stage/fa3 && cp -r ") for c in calls)
    assert calls[-1]["command"].endswith("python3 scripts/gpu_queue.py install --fa3")
    assert not any("install" in c["command"] for c in calls[:-1])
    staged = tmp_path / "stage"
    for c in calls:
        shutil.copytree(tmp_path / c["carry"][0], staged, dirs_exist_ok=True)
    queue.join_pieces(staged)
    assert sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file()) == [
        "a.whl", "b.whl", "bin/install.sh", "fa3/flash_ops.zst.00", "m.whl"]
    assert (staged / "a.whl").stat().st_size == 9000


def test_pages_take_the_worst_state_of_their_chunks_and_replace_only_the_marked_block():
    chunks = [queue.Chunk("a", "a", "true", 1, page="p.md"), queue.Chunk("b", "b", "true", 1, page="p.md"),
              queue.Chunk("c", "c", "true", 1, page="q.md"), queue.Chunk("d", "d", "true", 1, page="r.md")]
    records = {"a": {"rc": 0, "runtime": "r", "commit": "1111111x"}, "b": {"rc": 0, "runtime": "old", "commit": "2222222"},
               "c": None, "d": {"rc": 0, "runtime": "r", "commit": "3333333"}}
    table = queue.pages(chunks, records, "r")
    rows = {line.split(" | ")[0].strip("| []").split("]")[0]: line for line in table.splitlines()[2:]}
    assert " stale " in rows["p.md"] and "1 / 1 / 0" in rows["p.md"] and "1111111, 2222222" in rows["p.md"]
    assert " pending " in rows["q.md"] and " current " in rows["r.md"]
    readme = f"intro\n{queue.BEGIN}\nold table\n{queue.END}\nrest\n"
    assert queue.with_pages(readme, "new\n") == f"intro\n{queue.BEGIN}\nnew\n{queue.END}\nrest\n"
    assert queue.with_pages("no markers\n", "new\n") == "no markers\n"


def test_a_chunk_runs_into_its_folder_and_comes_back_whole_even_when_cut(tmp_path, monkeypatch):
    results = tmp_path / "docs" / "results"
    committed = results / "calibration" / "old"
    committed.mkdir(parents=True)
    (committed / "calibration.json").write_text("{}")
    monkeypatch.setattr(queue, "ROOT", tmp_path)
    monkeypatch.setattr(queue, "CALIBRATION", results / "calibration")
    monkeypatch.setattr(queue, "CHUNKS", tmp_path / "chunks")
    monkeypatch.setattr(queue, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(queue, "installed", lambda: True)
    monkeypatch.setattr(queue, "host_facts", lambda: {"gpu": "G, 1 MiB, GPU-1, 1", "software": "s"})
    # the chunk writes a result and a server log, calibrates a new entry, then overruns its limit
    command = ("echo 42 > $R/result.txt && echo line > $R/server.log && test -f $CORUN_SGLANG_CACHE/calibration/old/calibration.json"
               " && mkdir -p $CORUN_SGLANG_CACHE/calibration/new && echo '{}' > $CORUN_SGLANG_CACHE/calibration/new/calibration.json"
               " && sleep 30")
    chunk = queue.Chunk("c1", "t", command, 1, results="docs/results/queue/c1")
    out = tmp_path / "out"
    assert queue.execute(chunk, "abc", "rt", out, limit_s=3) == 124
    assert sorted(p.name for p in out.iterdir()) == ["c1.tar.gz", "chunk.json"]
    record = queue.ingest(chunk, out)
    assert record["rc"] == 124 and record["timed_out"] and record["commit"] == "abc" and record["runtime"] == "rt"
    assert record["calibration_added"] == ["new"] and (results / "calibration" / "new" / "calibration.json").exists()
    folder = results / "queue" / "c1"
    assert (folder / "result.txt").read_text() == "42\n" and (folder / "server.log.gz").exists()
    assert not (folder / "server.log").exists()
    # a rerun replaces the folder whole
    chunk = queue.Chunk("c1", "t", "echo again > $R/other.txt", 1, results="docs/results/queue/c1")
    assert queue.execute(chunk, "abd", "rt", out) == 0
    assert queue.ingest(chunk, out)["rc"] == 0 and not (folder / "result.txt").exists()
    assert queue.verdict(chunk, queue.record_of(chunk), "rt") == "current"


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A GPU host in ``tmp_path``: the project, its chunks' folders and cache there, SGLang installed."""
    monkeypatch.setattr(queue, "ROOT", tmp_path)
    monkeypatch.setattr(queue, "CALIBRATION", tmp_path / "calibration")
    monkeypatch.setattr(queue, "CHUNKS", tmp_path / "chunks")
    monkeypatch.setattr(queue, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(queue, "installed", lambda: True)
    monkeypatch.setattr(queue, "host_facts", lambda: {})
    return tmp_path


def test_a_bare_chunk_runs_where_sglang_is_not_installed_and_another_does_not(host, tmp_path, monkeypatch):
    monkeypatch.setattr(queue, "installed", lambda: False)
    command = "echo 42 > $R/result.txt"
    assert queue.execute(queue.Chunk("b", "t", command, 1, evidence="stock", bare=True), "abc", "rt", tmp_path / "o") == 0
    assert (tmp_path / "chunks" / "b" / "result.txt").read_text() == "42\n"
    assert queue.execute(queue.Chunk("n", "t", command, 1, evidence="stock"), "abc", "rt", tmp_path / "o") == 3
    assert not (tmp_path / "chunks" / "n" / "result.txt").exists()


def _without_sglang(module: str) -> None:
    """Imports ``module`` afresh with SGLang, FlashInfer and Transformers unimportable, as on a bare host."""
    blocked = ("sglang", "flashinfer", "transformers")

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ImportError(f"{name} is not on a bare host")

    saved = {name: mod for name, mod in sys.modules.items()
             if name.split(".")[0] in (*blocked, "corun_sglang", "bench")}
    for name in saved:
        del sys.modules[name]
    sys.meta_path.insert(0, Block())
    try:
        importlib.import_module(module)
    finally:
        sys.meta_path.pop(0)
        for name in [n for n in sys.modules if n.split(".")[0] in (*blocked, "corun_sglang", "bench")]:
            del sys.modules[name]
        sys.modules.update(saved)


def test_a_records_software_names_what_the_host_has_also_on_a_bare_host():
    import subprocess

    block = ("import sys\n"
             "class Block:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] in ('sglang', 'flashinfer'):\n"
             "            raise ImportError(name)\n"
             "sys.meta_path.insert(0, Block())\n")
    import torch

    def software(prefix):
        return subprocess.run([sys.executable, "-c", prefix + queue.SOFTWARE], capture_output=True, text=True,
                              check=True).stdout.strip()

    assert software(block) == f"torch {torch.__version__}"  # a bare host: torch alone, still named
    assert software("").startswith(f"torch {torch.__version__} sglang ")  # staged: all three


def test_every_bare_chunk_imports_nothing_a_bare_host_lacks():
    bare = [c for c in queue.load() if c.bare]
    assert bare
    for chunk in bare:
        _, argv = _words(chunk.command)
        assert argv[:2] == ["python3", "-m"], chunk.id
        _without_sglang(argv[2])
    with pytest.raises(ImportError):  # the control: a module that needs SGLang fails the same way
        _without_sglang("corun_sglang.serving.server_args")


def test_a_cut_chunk_leaves_nothing_running_also_in_sessions_of_its_own(host, tmp_path):
    # a "server" in a session of its own, as launch.Server starts it, writing its pid
    command = "setsid sleep 60 & echo $! > $R/pid; sleep 60"
    assert queue.execute(queue.Chunk("c2", "t", command, 1), "abc", "rt", tmp_path / "out", limit_s=2) == 124
    pid = int((tmp_path / "chunks" / "c2" / "pid").read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and b"Z" not in Path(f"/proc/{pid}/stat").read_bytes().split(b")")[-1][:3]:
        assert time.monotonic() < deadline, "the chunk's own-session process outlived it"
        time.sleep(0.1)


def test_a_suite_chunks_note_reaches_the_determinism_page_and_leaves_with_its_rerun(tmp_path):
    (tmp_path / "pair-a").mkdir()
    (tmp_path / "pair-b").mkdir()
    (tmp_path / "pair-b" / "note.md").write_text("The arm\nexited at i.\n")
    assert queue.suite_notes(tmp_path) == ["pair-b: The arm exited at i."]
    shutil.rmtree(tmp_path / "pair-b")  # ingest replaces a rerun chunk's folder whole
    assert queue.suite_notes(tmp_path) == []


def test_the_committed_queue_page_and_results_readme_are_current_for_head():
    """docs/results/queue.md and the pages table of docs/results/README.md say what ``page`` writes for HEAD's
    runtime: regenerate them (``scripts/gpu_queue.py page``) with every change to the runtime or the queue."""
    chunks = queue.load()
    records = {c.id: queue.record_of(c) for c in chunks}
    runtime = queue.runtime_hash()
    assert queue.PAGE.read_text() == queue.page(chunks, records, runtime)
    readme = (queue.RESULTS / "README.md").read_text()
    assert queue.with_pages(readme, queue.pages(chunks, records, runtime)) == readme


# ------------------------------------------------- every chunk's command names what exists (a GPU run is scarce)

def _words(command: str) -> tuple[dict[str, str], list[str]]:
    """A chunk's command as its environment and argv: ``$R`` a folder, a ``$(...)`` substitution a path."""
    command = re.sub(r"\$\((?:[^()]|\([^()]*\))*\)", "/tmp/checkpoint", command).replace("$R", "/tmp/results")
    words = shlex.split(command)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def _parse(parser, argv: list[str], what: str):
    try:
        return parser.parse_args(argv)
    except SystemExit:
        pytest.fail(f"{what}: {' '.join(argv)!r} does not parse")


def _server(argv: list[str], what: str) -> set[str]:
    """``argv`` parses as a launch_server command line with corun-sglang's options; returns what of ``NEEDS``
    that server uses: "fa3" where SGLang picks its attention backend itself (FA3 on Hopper) or is told FA3,
    and --corun does not set FlashInfer."""
    from corun_sglang.serving.server_args import CorunServerArgs

    parser = argparse.ArgumentParser(prog=what)
    CorunServerArgs.add_cli_args(parser)
    ns = _parse(parser, ["--model-path", "m", *argv], what)
    backends = {ns.attention_backend, ns.prefill_attention_backend, ns.decode_attention_backend}
    return {"fa3"} if "fa3" in backends or (not ns.corun and ns.attention_backend is None) else set()


def _shapes() -> set[str]:
    from corun_sglang.tools import models, synthetic

    return set(synthetic.SHAPES) | set(models.MODELS)


def _dict_keys(path: Path, name: str) -> set[str]:
    """The keys of the dict literal a module assigns to ``name`` (the GPU tests import nothing here)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return {ast.literal_eval(k) for k in node.value.keys}
    raise AssertionError(f"{path}: no {name}")


def _selected(files: list[Path], expression: str | None) -> list[str]:
    """The test functions of ``files`` a ``-k`` expression selects (matched, as pytest does, against the test's
    name and its module's)."""
    from _pytest.mark.expression import Expression

    tests = [(f.name, node.name) for f in files for node in ast.parse(f.read_text()).body
             if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]
    if not expression:
        return [name for _, name in tests]
    compiled = Expression.compile(expression)
    return [name for module, name in tests
            if compiled.evaluate(lambda ident, **_: any(ident.lower() in n.lower() for n in (module, name)))]


def _check_bench(chunk, argv: list[str]) -> set[str]:
    module = importlib.import_module(argv[0])
    parser = module.build_parser()
    args = _parse(parser, argv[1:], chunk.id)
    assert args.shape in _shapes(), f"{chunk.id}: shape {args.shape}"
    uses = {"smollm2"} if args.shape == "smollm2" else set()
    if argv[0] == "bench.prefill_history":  # its arms' servers are its own
        for arm in args.arms.split(","):
            uses |= _server([*module.SERVER_ARGS, *module.ARMS[arm]], f"{chunk.id} {arm}")
        return uses
    if argv[0] in ("bench.decode_split", "bench.gemm_tiers"):  # kernels and GEMMs alone, no server
        return uses | ({"fa3"} if getattr(args, "kernel", None) == "fa3" else set())
    shared = args.server_args.split()
    if argv[0] == "bench.run":
        arms, extra, _, _ = module.settle(parser, args)
        for arm in arms:
            uses |= _server([*module.ARMS[arm], *extra[arm], "--tp-size", str(args.tp_size), *shared],
                            f"{chunk.id} {arm}")
        return uses
    if argv[0] == "bench.step_profile":
        arms = module.run.arms_of(parser, args.arms)
        extra = module.run.arm_args(args.arm_args, arms)
        for arm in arms:
            uses |= _server([*module.run.ARMS[arm], *extra[arm], "--max-running-requests",
                             str(args.max_running_requests), *shared], f"{chunk.id} {arm}")
        return uses
    if argv[0] == "bench.first_start":
        return uses | _server(["--corun", *shared], chunk.id)
    return uses | _server(["--prefill-max-requests", "1", *shared], chunk.id)  # bench.prefix_grid


def _check_pytest(chunk, env: dict[str, str], argv: list[str]) -> set[str]:
    files = [ROOT / a for a in argv if a.endswith(".py")]
    assert files and all(f.is_file() for f in files), f"{chunk.id}: test files {files}"
    expression = argv[argv.index("-k") + 1] if "-k" in argv else None
    assert _selected(files, expression), f"{chunk.id}: -k {expression!r} selects no test of {files}"
    arms = _dict_keys(ROOT / "tests" / "gpu" / "test_suite.py", "ARMS")
    unknown = set(filter(None, env.get("CORUN_SUITE_ARMS", "").split(","))) - arms
    assert not unknown, f"{chunk.id}: CORUN_SUITE_ARMS names unknown arms {sorted(unknown)}"
    shapes = set(filter(None, (env.get("CORUN_SUITE_SHAPES", "") + "," + env.get("CORUN_SHAPE", "")).split(",")))
    assert shapes <= _shapes(), f"{chunk.id}: unknown shapes {sorted(shapes - _shapes())}"
    uses = {"smollm2"} & shapes
    for name in ("CORUN_SUITE_SERVER_ARGS", "CORUN_SERVER_ARGS"):
        if name in env:  # the GPU tests' servers set FlashInfer unless these say otherwise
            uses |= _server(env[name].split(), f"{chunk.id} {name}")
    if "CORUN_SUITE_CORUN_ARGS" in env:
        corun = env["CORUN_SUITE_CORUN_ARGS"].split()
        _server(["--corun", *corun], f"{chunk.id} CORUN_SUITE_CORUN_ARGS")
        from corun_sglang.core import requests_check

        if requests_check.MEASURE_OPTION in corun:
            named = set(corun[corun.index(requests_check.MEASURE_OPTION) + 1].split(","))
            measurable = requests_check.measurable_names()
            assert named <= measurable, f"{chunk.id}: not measurable: {sorted(named - measurable)}"
    return uses


@pytest.mark.parametrize("chunk", queue.load(), ids=lambda c: c.id)
def test_every_chunk_command_parses_and_names_what_exists(chunk, sglang_plugins):
    """What a GPU run would find out at its first second: options that do not parse, an arm, shape, workload,
    test or script that does not exist, a ``-k`` that selects nothing."""
    env, argv = _words(chunk.command)
    if argv[:2] == ["python3", "-m"] and argv[2].startswith("bench."):
        uses = _check_bench(chunk, argv[2:])
    elif argv[:3] == ["python3", "-m", "pytest"]:
        uses = _check_pytest(chunk, env, argv[3:])
    elif argv[0] == "corun-sglang":
        from corun_sglang.commands import cli

        _parse(cli.build_parser(), argv[1:], chunk.id)
        uses = {"smollm2"} if argv[1] == "demo" else set()  # the demo serves SmolLM2 from its package
    elif argv[0] == "bash":
        assert (ROOT / argv[1]).is_file(), f"{chunk.id}: {argv[1]}"
        uses = set(chunk.needs) - {"router"}  # a script's servers are its own
    else:
        pytest.fail(f"{chunk.id}: a command of a kind this check does not know: {argv[:3]}")
    # staged for what it uses, and nothing more: a missing wheel fails on the host, a needless one costs calls
    assert uses == set(chunk.needs) - {"router"}, f"{chunk.id}: needs {sorted(chunk.needs)}, uses {sorted(uses)}"


@pytest.mark.parametrize("command", [
    "python3 -m bench.run --arms STD,CoRun-typo --workloads sharegpt",  # an arm that does not exist
    "python3 -m bench.run --arms STD --workloads sharegtp",  # a workload that does not exist
    "python3 -m bench.first_start --shape smollm2 --server-args='--chunked-prefil-size 2048'",  # a misspelt option
    "CORUN_SUITE_ARMS=corun python3 -m pytest tests/gpu/test_suite.py -k test_n",  # a scenario renamed away
    "CORUN_SUITE_ARMS=corun,radix python3 -m pytest tests/gpu/test_suite.py",  # an arm of another harness
    "CORUN_SUITE_CORUN_ARGS='--corun-measure top_logprobs_num,seed' python3 -m pytest tests/gpu/test_suite.py",
    "python3 -m bench.run --arms STD,CoRun --workloads sharegpt",  # STD serves FA3, which is not staged
    "python3 -m bench.first_start --shape smollm2",  # SmolLM2's package is not staged
])
def test_the_command_check_catches_what_a_gpu_run_would(command, sglang_plugins):
    with pytest.raises((AssertionError, SystemExit, pytest.fail.Exception)):
        test_every_chunk_command_parses_and_names_what_exists(
            queue.Chunk(id="broken", title="broken", command=command, minutes=1, evidence="runtime"), sglang_plugins)


def test_fitting_keeps_order_passes_over_what_does_not_fit_and_prefers_measured_time():
    a, b, c, d = (_chunk(id=i, minutes=m) for i, m in (("a", 5), ("b", 7), ("c", 3), ("d", 1)))
    big = _chunk(id="big", minutes=2, gpu="h200")
    todo = [(x, "never ran") for x in (a, big, b, c, d)]
    # b ran before (stale) in 100 s: its measured time counts, not its 7-minute estimate
    records = {"b": {"rc": 0, "wall_s": 100.0, "runtime": "old"}}
    assert [x.id for x in queue.fitting(todo, records, 600, "h100")] == ["a", "b", "c"]
    assert [x.id for x in queue.fitting(todo, {}, 600, "h100")] == ["a", "c", "d"]  # b's estimate does not fit
    assert [x.id for x in queue.fitting(todo, records, 600, "h200")] == ["a", "big", "b", "d"]
    assert queue.fitting(todo, records, 600, "x2") == []
    # a run that was cut says nothing of the whole chunk's time: the estimate stands
    assert queue.expected_s(b, {"rc": 124, "wall_s": 50.0, "timed_out": True}) == 420


def test_exec_refuses_a_limit_below_the_chunks_own_time(capsys):
    """A chunk cut short reruns whole, so a limit below its ``minutes`` only spends GPU time."""
    chunk = queue.load()[0]
    with pytest.raises(SystemExit):
        queue.main(["exec", chunk.id, "--commit", "abc", "--runtime", "rt", "--limit-s", str(int(chunk.minutes * 60) - 1)])
    assert f"below {chunk.id}'s own" in capsys.readouterr().err


def test_a_call_is_measured_in_disk_blocks(tmp_path, monkeypatch):
    """Many small files take more of a call than their bytes: each rounds up to a block, and so does the tree."""
    (tmp_path / "tiny").write_bytes(b"x")
    monkeypatch.setattr(queue, "ROOT", tmp_path)
    monkeypatch.setattr(queue, "_git", lambda *a: "tiny\0")
    assert queue.tree_bytes() >= 512  # one byte on disk is at least one block
    files = [(Path(f"f{i}"), "", 100) for i in range(10)]
    calls = queue.plan_calls(files, capacity=4096 * 4, block=4096)
    assert [len(c) for c in calls] == [4, 4, 2]
    big = queue.plan_calls([(Path("w"), "", 10_000)], capacity=4096 * 2, block=4096)
    assert [sum(p.size for p in c) for c in big] == [8192, 1808]


def test_regenerate_tables_every_chunks_step_profile_on_the_profiles_page(tmp_path, monkeypatch):
    bench = ROOT / "docs" / "results" / "bench"
    run = tmp_path / "bench" / "v2" / "dense-sharegpt-r0"
    run.mkdir(parents=True)
    shutil.copy(bench / "v2" / "dense-sharegpt-r0" / "runs.jsonl", run / "runs.jsonl")
    profile = tmp_path / "bench" / "v2" / "profile-dense-steps"
    profile.mkdir()
    shutil.copy(bench / "step_profile.jsonl", profile / "step_profile.jsonl")
    monkeypatch.setattr(queue, "RESULTS", tmp_path)
    queue.regenerate()
    page = (tmp_path / "bench" / "v2" / "profiles.md").read_text()
    assert str(profile / "step_profile.jsonl") in page
    assert "| qwen3-8b | 256 | CoRun |" in page
    assert "profiles.md" in (tmp_path / "benchmarks_v2.md").read_text()


def test_regenerate_names_each_runs_runtime_and_reports_the_current_ones(tmp_path, monkeypatch):
    bench = ROOT / "docs" / "results" / "bench" / "v2"
    source = [json.loads(line) for line in (bench / "dense-sharegpt-r0" / "runs.jsonl").read_text().splitlines()]
    for rep, runtime in ((0, queue.runtime_hash()), (1, "0123456789ab")):  # one current chunk, one stale
        run = tmp_path / "bench" / "v2" / f"dense-sharegpt-r{rep}"
        run.mkdir(parents=True)
        (run / "runs.jsonl").write_text("".join(json.dumps({**r, "rep": rep}) + "\n" for r in source))
        (run / "chunk.json").write_text(json.dumps({"id": run.name, "runtime": runtime}))
    monkeypatch.setattr(queue, "RESULTS", tmp_path)
    queue.regenerate()
    merged = [json.loads(line) for line in (tmp_path / "bench" / "v2" / "runs.jsonl").read_text().splitlines()]
    assert {(r["rep"], r["runtime"]) for r in merged} == {(0, queue.runtime_hash()), (1, "0123456789ab")}
    summary = (tmp_path / "benchmarks_v2.md").read_text()
    assert f"The current runtime is `{queue.runtime_hash()}`" in summary
    target = next(line for line in summary.splitlines() if line.startswith("| CoRun >= 0.9x STD at"))
    assert "| 1 | current |" in target  # the stale repetition is left out where a current one exists
    page = (tmp_path / "bench" / "v2" / "v2-dense.md").read_text()
    assert f"Runs on runtime `{queue.runtime_hash()}` (current)." in page
