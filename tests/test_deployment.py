"""The replicas-behind-a-router recipes (docs/deployment.md): the compose file and the Kubernetes
manifests configure the replicas identically, and the router's command line, read by the router's own
argument parser, names every replica and keeps retries and health checks on."""

import argparse
import json
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from corun_sglang.core import refusals

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker" / "compose.replicas.yaml"
K8S = ROOT / "docs" / "k8s" / "corun-sglang.yaml"
#: Replica options that may differ between replicas: where a replica listens, and its memory budget
#: (calibration.MEMORY_OPTIONS: neither the fingerprint nor the calibration key holds it).
PER_REPLICA = ("--port", "--mem-fraction-static")


def router_args(argv):
    """``argv`` parsed by the router's own launcher (the pinned ``router`` extra)."""
    module = pytest.importorskip("sglang_router.router_args",
                                 reason="sglang-router (the router extra) is not installed")
    parser = argparse.ArgumentParser()
    module.RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return module.RouterArgs.from_cli_args(parser.parse_args([str(a) for a in argv]), use_router_prefix=False)


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def replicas(compose):
    found = {name: s for name, s in compose["services"].items() if "sglang.launch_server" in s.get("entrypoint", [])}
    assert len(found) == 2, sorted(found)
    return found


def _option(argv, name):
    return argv[argv.index(name) + 1]


def _without(argv, names):
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        else:
            out.append(arg)
    return out


def test_replicas_share_one_option_list_and_differ_only_in_name_port_and_memory(replicas):
    services = list(replicas.values())
    # the options are written once: one entrypoint, and every key but the per-replica ones, equal
    shared = [{k: v for k, v in s.items() if k not in ("command", "ports", "healthcheck", "depends_on")}
              for s in services]
    assert shared[0] == shared[1]
    assert COMPOSE.read_text().count("sglang.launch_server") == 1  # an anchor merged into both, not a copy
    assert _without(services[0]["command"], PER_REPLICA) == _without(services[1]["command"], PER_REPLICA) == []
    assert len({_option(s["command"], "--port") for s in services}) == 2
    for s in services:
        argv = [*s["entrypoint"], *s["command"]]
        assert "--corun" in argv and "--model-path" in argv
        assert not set(argv) & {"--dp-size", "--enable-dp-attention"}
        assert float(_option(argv, "--mem-fraction-static")) < 1


def test_each_replica_is_checked_restarted_and_on_the_gpu_with_the_shared_cache(compose, replicas):
    for s in replicas.values():
        port = _option(s["command"], "--port")
        check = s["healthcheck"]
        assert check["test"][0] == "CMD" and check["test"][-1] == f"http://127.0.0.1:{port}/health"
        assert set(check) >= {"interval", "timeout", "start_period", "retries"}
        assert s["restart"] in ("unless-stopped", "always") and s["init"] is True
        assert any(p.endswith(f":{port}") for p in s["ports"])
        (device,) = s["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        env = dict(item.split("=", 1) for item in s["environment"])
        mounts = dict(reversed(m.rsplit(":", 1)) for m in s["volumes"])
        assert mounts[env["CORUN_SGLANG_CACHE"]] in compose["volumes"]  # one named volume for both
    devices = [s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for s in replicas.values()]
    assert devices[0] == devices[1]  # one GPU


def test_the_router_names_every_replica_and_retries_on_another(compose, replicas):
    router = compose["services"]["router"]
    assert router["entrypoint"] == ["python3", "-m", "sglang_router.launch_router"]
    assert router["restart"] in ("unless-stopped", "always")
    assert router["healthcheck"]["test"][-1].endswith(":30000/liveness")
    assert {name: dep["condition"] for name, dep in router["depends_on"].items()} == {
        name: "service_healthy" for name in replicas}
    parsed = router_args(router["command"])
    assert sorted(parsed.worker_urls) == sorted(
        f"http://{name}:{_option(s['command'], '--port')}" for name, s in replicas.items())
    assert parsed.port == 30000 and any(p.endswith(":30000") for p in router["ports"])
    assert parsed.policy == "round_robin"  # a retry goes to the next replica
    assert not parsed.disable_retries and parsed.retry_max_retries >= 3
    assert not parsed.disable_circuit_breaker and parsed.cb_failure_threshold < parsed.retry_max_retries
    assert not parsed.disable_health_check and parsed.health_check_endpoint == "/health"


def test_the_second_replica_starts_once_the_first_is_healthy(replicas):
    # its memory fraction is of what the first leaves free; and it serves the first one's records
    first, second = replicas
    assert replicas[second]["depends_on"] == {first: {"condition": "service_healthy"}}


@pytest.fixture(scope="module")
def k8s():
    docs = list(yaml.safe_load_all(K8S.read_text()))
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _container(deployment):
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_k8s_replicas_are_one_deployment_with_probes_on_health_and_the_cache_on_a_claim(k8s):
    replicas = k8s["Deployment", "corun-sglang-replica"]
    spec = replicas["spec"]["template"]["spec"]
    container = _container(replicas)
    argv = [*container["command"], *container["args"]]
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"] and "--corun" in argv
    assert replicas["spec"]["replicas"] >= 2 and container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu.product" in spec["nodeSelector"]  # one GPU model
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
    env = {e["name"]: e.get("value") for e in container["env"]}
    (cache,) = [m for m in container["volumeMounts"] if m["mountPath"] == env["CORUN_SGLANG_CACHE"]]
    (volume,) = [v for v in spec["volumes"] if v["name"] == cache["name"]]
    claim = volume["persistentVolumeClaim"]["claimName"]
    assert "ReadWriteMany" in k8s["PersistentVolumeClaim", claim]["spec"]["accessModes"]


def test_k8s_router_points_at_the_replicas_service(k8s):
    replicas = k8s["Deployment", "corun-sglang-replica"]
    service = k8s["Service", "corun-sglang-replicas"]
    assert service["spec"]["selector"] == replicas["spec"]["selector"]["matchLabels"]
    (port,) = service["spec"]["ports"]
    (container_port,) = _container(replicas)["ports"]
    assert port["targetPort"] == container_port["name"]
    assert _option(_container(replicas)["args"], "--port") == str(container_port["containerPort"])

    router = k8s["Deployment", "corun-sglang-router"]
    container = _container(router)
    assert container["command"] == ["python3", "-m", "sglang_router.launch_router"]
    parsed = router_args(container["args"])
    assert parsed.service_discovery and parsed.selector == service["spec"]["selector"]
    assert parsed.service_discovery_port == container_port["containerPort"] == port["port"]
    assert parsed.policy == "round_robin" and not parsed.disable_retries
    assert container["readinessProbe"]["httpGet"]["path"] == "/readiness"
    assert container["livenessProbe"]["httpGet"]["path"] == "/liveness"
    # it may list and watch the pods it routes to
    account = router["spec"]["template"]["spec"]["serviceAccountName"]
    binding = k8s["RoleBinding", account]
    assert binding["subjects"][0]["name"] == account
    rules = k8s["Role", binding["roleRef"]["name"]]["rules"]
    assert any("pods" in r["resources"] and {"list", "watch"} <= set(r["verbs"]) for r in rules)
    assert k8s["Service", "corun-sglang"]["spec"]["selector"] == router["spec"]["selector"]["matchLabels"]


def test_k8s_and_compose_routers_retry_and_check_health_alike(compose, k8s):
    fields = ("retry_max_retries", "retry_initial_backoff_ms", "retry_max_backoff_ms", "cb_failure_threshold",
              "cb_timeout_duration_secs", "health_check_interval_secs", "health_failure_threshold",
              "health_success_threshold", "policy")
    a = router_args(compose["services"]["router"]["command"])
    b = router_args(_container(k8s["Deployment", "corun-sglang-router"])["args"])
    assert {f: getattr(a, f) for f in fields} == {f: getattr(b, f) for f in fields}


def test_the_router_is_pinned_as_an_extra_and_installed_with_the_tests_and_the_image():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = extras["router"]
    assert re.fullmatch(r"sglang-router==[\d.]+", pin)
    assert pin in extras["test"]
    assert "[models,router]" in (ROOT / "docker" / "install.sh").read_text()
    try:
        installed = importlib.metadata.version("sglang-router")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("sglang-router (the router extra) is not installed")
    assert pin == f"sglang-router=={installed}"  # the parser these tests read is the pinned one


def test_dp_size_is_refused_with_replicas_behind_the_router_as_the_fix():
    from types import SimpleNamespace

    from corun_sglang.serving.server_args import _sglang_defaults

    args = SimpleNamespace(**{**_sglang_defaults(), "dp_size": 2})
    (message,) = refusals.refusals(args)
    assert message.startswith("--dp-size: ") and "router" in message and "docs/deployment.md" in message
    args = SimpleNamespace(**{**_sglang_defaults(), "enable_dp_attention": True})
    (message,) = refusals.refusals(args)
    assert message.startswith("--enable-dp-attention: ") and "docs/deployment.md" in message


def test_the_docs_link_the_deployment_page():
    assert "(docs/deployment.md)" in (ROOT / "README.md").read_text()
    assert "(deployment.md)" in (ROOT / "docs" / "operations.md").read_text()
    page = (ROOT / "docs" / "deployment.md").read_text()
    for path in ("../docker/compose.replicas.yaml", "k8s/corun-sglang.yaml"):
        assert f"({path})" in page and (ROOT / "docs" / path).resolve().exists()


# ------------------------------------------------------------------ the router itself, before stand-ins

STAND_IN = r'''
"""A stand-in replica: /health and the info routes answer 200; each POST body is appended to
FOLDER/NAME.bodies. The first request of all (the one that creates FOLDER/first) hangs: unstreamed,
without an answer; streamed, after two events. Every other one answers at once."""
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, name, folder = int(sys.argv[1]), sys.argv[2], sys.argv[3]


def event(k, last):
    meta = {"output_token_logprobs": [[-0.5 * i, 100 + i, None] for i in range(1, k + 1)],
            "completion_tokens": k, "finish_reason": {"type": "length"} if last else None}
    return ("data: " + json.dumps({"served_by": name, "meta_info": meta}) + "\n\n").encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(200, {"model_path": "m", "served_model_name": "m"})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(os.path.join(folder, name + ".bodies"), "a") as f:
            f.write(raw.decode() + "\n")
        try:
            fd = os.open(os.path.join(folder, "first"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(fd, name.encode())
            os.close(fd)
            first = True
        except FileExistsError:
            first = False
        if not json.loads(raw).get("stream"):
            if first:
                time.sleep(600)
            meta = {"output_token_logprobs": [[-0.5, 101, None]], "completion_tokens": 1,
                    "finish_reason": {"type": "length"}}
            return self.reply(200, {"served_by": name, "meta_info": meta})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for k in (1, 2, 3):
            if first and k == 3:
                time.sleep(600)
            data = event(k, k == 3)
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        done = b"data: [DONE]\n\n"
        self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url, timeout=60):
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(url)


@pytest.fixture
def routed(tmp_path, compose):
    """Two stand-in replicas behind the real router, run with the compose file's options: the router's
    URL, the stand-ins' processes by name, and the folder where they write what they received."""
    import subprocess
    import sys

    pytest.importorskip("sglang_router.launch_router", reason="sglang-router (the router extra) is not installed")
    from bench.replicas import compose_router, router_command

    (tmp_path / "standin.py").write_text(STAND_IN)
    procs, urls = {}, []
    for name in ("a", "b"):
        port = _free_port()
        procs[name] = subprocess.Popen([sys.executable, str(tmp_path / "standin.py"), str(port), name, str(tmp_path)])
        urls.append(f"http://127.0.0.1:{port}")
        _wait(urls[-1] + "/health")
    policy, options = compose_router(COMPOSE)
    port = _free_port()
    with open(tmp_path / "router.log", "w") as log:
        router = subprocess.Popen(router_command(urls, policy, port, options), stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(f"http://127.0.0.1:{port}/readiness")
        yield f"http://127.0.0.1:{port}", procs, tmp_path
    finally:
        for proc in [router, *procs.values()]:
            proc.kill()
            proc.wait()


def _received(folder):
    return [json.loads(line) for f in sorted(folder.glob("*.bodies")) for line in f.read_text().splitlines()]


def _first(folder, timeout=30):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = folder / "first"
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise TimeoutError("no request reached a replica")


def test_the_router_forwards_its_own_request_types(routed):
    # what docs/deployment.md says the router does to a request: fields it does not know are dropped
    # (an unknown sampling parameter never meets --corun's 400), floats pass as 32-bit, chat n > 10 is
    # its own 400; the seed fields arrive intact
    import httpx

    router, _, folder = routed
    (folder / "first").write_text("none")  # no request hangs
    body = {"input_ids": [1, 2, 3], "return_logprob": True, "rid": "r1", "return_prompt_token_ids": True,
            "sampling_params": {"max_new_tokens": 4, "temperature": 0.123456789, "top_p": 0.95,
                                "sampling_seed": 2**63 - 1, "temprature": 0.5}}
    assert httpx.post(router + "/generate", json=body, timeout=30).status_code == 200
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 5,
            "logprobs": True, "return_token_ids": True}
    assert httpx.post(router + "/v1/chat/completions", json=chat, timeout=30).status_code == 200
    refused = httpx.post(router + "/v1/chat/completions", json={**chat, "n": 12}, timeout=30)
    assert refused.status_code == 400 and "n" in refused.text
    (generate,) = [r for r in _received(folder) if "input_ids" in r]
    (forwarded_chat,) = [r for r in _received(folder) if "messages" in r]
    params = generate["sampling_params"]
    assert params["sampling_seed"] == 2**63 - 1 and "temprature" not in params
    assert params["temperature"] == 0.12345679 and params["top_p"] == 0.95
    assert generate["return_logprob"] is True and generate["rid"] == "r1" and "return_prompt_token_ids" not in generate
    assert forwarded_chat["seed"] == 5 and forwarded_chat["logprobs"] is True
    assert "return_token_ids" not in forwarded_chat and forwarded_chat["max_completion_tokens"] == 4


def test_the_router_retries_a_request_whose_replica_is_lost_on_the_other(routed):
    from concurrent.futures import ThreadPoolExecutor

    from bench import replicas

    router, procs, folder = routed
    req = replicas.Req("000-gen", replicas.GENERATE, False, 7, {"input_ids": [1], "sampling_params": {}})
    with ThreadPoolExecutor(1) as pool:
        reply = pool.submit(replicas.send, router, req)
        lost = _first(folder)
        procs[lost].kill()
        outcome = reply.result(timeout=60)
    assert outcome.finished and outcome.status == 200  # the client saw a slower reply, nothing else
    (other,) = set(procs) - {lost}
    assert [b["input_ids"] for b in _received(folder)] == [[1], [1]]
    assert (folder / f"{other}.bodies").exists()


def test_the_router_does_not_retry_a_stream_under_way(routed):
    # the client gets the stream's first events, then an end without finish_reason: its own retry's
    from concurrent.futures import ThreadPoolExecutor

    from bench import replicas

    router, procs, folder = routed
    req = replicas.Req("001-gen-stream", replicas.GENERATE, True, 7,
                       {"input_ids": [1], "sampling_params": {}, "stream": True})
    with ThreadPoolExecutor(1) as pool:
        reply = pool.submit(replicas.send, router, req)
        procs[_first(folder)].kill()
        outcome = reply.result(timeout=60)
    assert not outcome.finished and outcome.generation.tokens == (101, 102)
    assert len(_received(folder)) == 1  # not sent again by the router
    again = replicas.send(router, req)  # the client's retry: the other replica, whole
    assert again.finished and replicas.is_prefix(outcome.generation, again.generation)
